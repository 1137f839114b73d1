//! Pure variant logic (being written).
