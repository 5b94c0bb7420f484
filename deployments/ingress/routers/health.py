"""Liveness: answers while the ingress runs, touches no model."""

from fastapi import APIRouter

from deployments import SERVICE_NAME, __version__

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict:
    return {"status": "healthy", "service": SERVICE_NAME, "version": __version__}
