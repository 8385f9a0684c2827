//! Columns of any element type, for tables whose payloads mix widths and signedness.

use crate::{Backend, Buffer, Element};

/// A column owned by a backend, of any [`Element`] type: 4- and 8-byte payloads mix in one
/// table. Operations that move rows (partition, gather, sort) move bits and keep the type.
pub enum Column<B: Backend> {
    /// 4-byte unsigned.
    U32(B::Buf<u32>),
    /// 4-byte signed.
    I32(B::Buf<i32>),
    /// 8-byte unsigned.
    U64(B::Buf<u64>),
    /// 8-byte signed.
    I64(B::Buf<i64>),
}

/// A borrowed [`Column`]: a column of any [`crate::Element`] type that its owner keeps (a
/// table's keys beside its payload columns, for an operation over all of them at once).
pub enum ColumnRef<'a, B: Backend> {
    /// 4-byte unsigned.
    U32(&'a B::Buf<u32>),
    /// 4-byte signed.
    I32(&'a B::Buf<i32>),
    /// 8-byte unsigned.
    U64(&'a B::Buf<u64>),
    /// 8-byte signed.
    I64(&'a B::Buf<i64>),
}

impl<B: Backend> Column<B> {
    /// The column, borrowed.
    pub fn as_column_ref(&self) -> ColumnRef<'_, B> {
        match self {
            Column::U32(c) => ColumnRef::U32(c),
            Column::I32(c) => ColumnRef::I32(c),
            Column::U64(c) => ColumnRef::U64(c),
            Column::I64(c) => ColumnRef::I64(c),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        crate::each_column!(self, c => c.len())
    }

    /// Whether the column has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per element.
    pub fn width(&self) -> usize {
        match self {
            Column::U32(_) | Column::I32(_) => 4,
            Column::U64(_) | Column::I64(_) => 8,
        }
    }

    /// This column's rows followed by `other`'s, in a new column on `b`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] when the element types differ; as
    /// [`Backend::concat`].
    pub fn concat(&self, b: &B, other: &Column<B>) -> crate::Result<Column<B>> {
        Ok(match (self, other) {
            (Column::U32(a), Column::U32(c)) => Column::U32(b.concat(a, c)?),
            (Column::I32(a), Column::I32(c)) => Column::I32(b.concat(a, c)?),
            (Column::U64(a), Column::U64(c)) => Column::U64(b.concat(a, c)?),
            (Column::I64(a), Column::I64(c)) => Column::I64(b.concat(a, c)?),
            _ => {
                return Err(crate::Error::InvalidArgument(format!(
                    "concatenating a {self:?} column and a {other:?} one"
                )));
            }
        })
    }
}

impl<B: Backend> std::fmt::Debug for Column<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ty = match self {
            Column::U32(_) => u32::NAME,
            Column::I32(_) => i32::NAME,
            Column::U64(_) => u64::NAME,
            Column::I64(_) => i64::NAME,
        };
        write!(f, "Column<{ty}>[{}]", self.len())
    }
}

/// Runs `$body` with `$c` bound to the buffer inside a [`Column`] (by value, reference or
/// mutable reference, as `$col` is), whatever its element type.
#[macro_export]
macro_rules! each_column {
    ($col:expr, $c:ident => $body:expr) => {
        match $col {
            $crate::Column::U32($c) => $body,
            $crate::Column::I32($c) => $body,
            $crate::Column::U64($c) => $body,
            $crate::Column::I64($c) => $body,
        }
    };
}

/// Builds a [`Column`] of the same element type as `$col` from `$body`, with `$c` bound to the
/// buffer inside `$col` and `$t` to its element type: `map_column!(&col, c, T => gather::<T>(c))`.
#[macro_export]
macro_rules! map_column {
    ($col:expr, $c:ident, $t:ident => $body:expr) => {
        match $col {
            $crate::Column::U32($c) => {
                type $t = u32;
                $crate::Column::U32($body)
            }
            $crate::Column::I32($c) => {
                type $t = i32;
                $crate::Column::I32($body)
            }
            $crate::Column::U64($c) => {
                type $t = u64;
                $crate::Column::U64($body)
            }
            $crate::Column::I64($c) => {
                type $t = i64;
                $crate::Column::I64($body)
            }
        }
    };
}
