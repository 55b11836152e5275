//! Transport names.
