//! leader (being written).
