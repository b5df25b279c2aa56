//! Operon SDK
