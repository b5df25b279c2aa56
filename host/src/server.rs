//! server (being written).
