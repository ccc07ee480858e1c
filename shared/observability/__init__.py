"""What the functions say about themselves: JSON logs, Prometheus metrics, OpenTelemetry traces, and
the timing of one delivery. Imports nothing of the project.
"""
