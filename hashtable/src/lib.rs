//! # joinkit-hashtable
//!
//! Lock-free hash tables for hash joins: open addressing (CAS insert, linear or double
//! probing) and chaining (bucket heads + chain array, atomic exchange); build, probe-count,
//! probe-retrieve. CUDA kernels and CPU twins share one contract over
//! [`joinkit_cuda::Backend`].

pub use joinkit_cuda::{Backend, Error, Result};
