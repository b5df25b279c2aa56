//! metrics (being written).
