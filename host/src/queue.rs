//! queue (being written).
