"""The hub's REST API: FastAPI routers, answer models, auth, the dashboard and the API's client."""
