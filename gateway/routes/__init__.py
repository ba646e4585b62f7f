"""One router per resource, as LangGraph Platform groups its API."""
