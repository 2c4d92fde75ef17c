//! aml-approval's flood tests, in a binary of its own: they load the machine on purpose and
//! hold the page to time bounds, and cargo runs test binaries one after another, so no other
//! test runs beside them (and they take turns: `common::flooding_alone`).

#[cfg(feature = "web")]
#[path = "../it/common/mod.rs"]
mod common;

#[cfg(feature = "web")]
mod flood;
#[cfg(feature = "web")]
mod lockout;
