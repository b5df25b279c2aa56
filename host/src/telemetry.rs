//! telemetry (being written).
