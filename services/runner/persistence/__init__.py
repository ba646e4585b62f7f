"""LangGraph's checkpointer and store on the runner's database, fenced so that a
runner that lost a run writes nothing; the runner's own rows; each user's store."""
