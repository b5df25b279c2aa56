//! operon
