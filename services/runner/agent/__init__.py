"""Assembly of the built-in `lead_agent`: tools, middleware, prompt, model.

Adding a provider (models.py) or a tool (tools.py) never touches the run loop.
"""
