"""OpenTelemetryEventSink wired into the polyloop-contract kit (run with --polyloop-contract)."""
