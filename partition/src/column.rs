//! The row-id option and checks on payload columns ([`joinkit_cuda::Column`]).

use joinkit_cuda::{Backend, Column, Element, Error, Result};

/// Copies a column to the host as bit patterns zero-extended to 64 bits
/// ([`Element::to_bits`]): one type for columns of any width.
pub(crate) fn column_bits<B: Backend>(backend: &B, col: &Column<B>) -> Result<Vec<u64>> {
    joinkit_cuda::each_column!(col, b => Ok(backend
        .download(b)?
        .into_iter()
        .map(Element::to_bits)
        .collect()))
}

/// Whether a partition call also returns the permutation it applied, as row ids: position `i`
/// of the output holds the input row that landed there, so other columns can be gathered later
/// (GFUR) instead of being moved now (GFTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowIds {
    /// No row ids.
    #[default]
    None,
    /// 4-byte row ids (inputs of at most 2^32 rows).
    U32,
    /// 8-byte row ids.
    U64,
}

impl RowIds {
    /// Width in bytes, `None` for [`RowIds::None`].
    pub fn width_bytes(self) -> Option<usize> {
        match self {
            RowIds::None => None,
            RowIds::U32 => Some(4),
            RowIds::U64 => Some(8),
        }
    }
}

/// Checks that every payload has `n` rows and that the row ids can number `n` rows; returns the
/// number of columns moved (payloads plus the row ids).
pub(crate) fn check_columns<B: Backend>(
    what: &'static str,
    n: usize,
    payloads: &[Column<B>],
    row_ids: RowIds,
) -> Result<usize> {
    for p in payloads {
        Error::check_len(what, n, p.len())?;
    }
    if row_ids == RowIds::U32 && n as u64 > 1u64 << 32 {
        return Err(Error::SizeOverflow(
            "more than 2^32 rows do not fit 4-byte row ids",
        ));
    }
    Ok(payloads.len() + usize::from(row_ids != RowIds::None))
}
