"""Running the system: process start-up and shutdown (lifespan, hand-off), health and readiness probes."""
