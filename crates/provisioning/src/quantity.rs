//! Storage sizes: re-exported from the `quantity` crate, which the driver and CLI share.

pub use ::quantity::{QuantityError, format_binary_si, parse_quantity};
