"""NATS: the bridge (one asyncio thread owns the nats-py client), the streams the dashboard
creates, and the bundled nats-server."""
