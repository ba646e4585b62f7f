def forecast(city: str) -> str:
    return f"sunny in {city}"
