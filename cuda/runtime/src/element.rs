//! The element types joinkit columns hold, and the key types it joins on.

use std::fmt::Debug;
use std::hash::Hash;

mod sealed {
    pub trait Sealed {}
}

/// Extra bounds an element needs on the CUDA backend (cudarc's device representation).
#[cfg(feature = "cuda")]
pub trait DeviceElement: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits {}
#[cfg(feature = "cuda")]
impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> DeviceElement for T {}
/// Extra bounds an element needs on the CUDA backend (none without the `cuda` feature).
#[cfg(not(feature = "cuda"))]
pub trait DeviceElement {}
#[cfg(not(feature = "cuda"))]
impl<T> DeviceElement for T {}

/// A fixed-width column element: 4- or 8-byte integers.
///
/// Sealed: kernels exist for exactly these types, named by [`Element::NAME`] in kernel entry
/// points (`gather_u32_u64`).
pub trait Element:
    sealed::Sealed
    + DeviceElement
    + bytemuck::Pod
    + Copy
    + Default
    + Debug
    + PartialEq
    + Send
    + Sync
    + 'static
{
    /// Suffix of this type in kernel names (`"u32"`, `"i64"`, ...).
    const NAME: &'static str;
    /// Width in bits.
    const BITS: u32;
    /// The element's bit pattern, zero-extended to 64 bits.
    fn to_bits(self) -> u64;
    /// The element with the low `BITS` bits of `bits` as its pattern.
    fn from_bits(bits: u64) -> Self;

    /// `buf` as a borrowed column of this type (a table's keys beside its payloads).
    fn column_ref<B: crate::Backend>(buf: &B::Buf<Self>) -> crate::ColumnRef<'_, B>;

    /// `buf` as a column of this type.
    fn into_column<B: crate::Backend>(buf: B::Buf<Self>) -> crate::Column<B>;

    /// The buffer of a column of this type; the column back when it holds another type.
    ///
    /// # Errors
    /// The column itself when it is not of this type.
    fn from_column<B: crate::Backend>(
        column: crate::Column<B>,
    ) -> std::result::Result<B::Buf<Self>, crate::Column<B>>;
}

/// A join or sort key: an unsigned integer whose bit pattern orders like its value.
///
/// Signed columns are keyed by their bit pattern after a sign flip (done by the caller), as
/// radix sorts do.
pub trait Key: Element + Ord + Hash {
    /// The largest key; also used as a sentinel by some structures (which must still accept it
    /// as a real key).
    const MAX: Self;
    /// Widens to `u64`.
    fn to_u64(self) -> u64;
    /// Truncates a `u64` to this width.
    fn from_u64(v: u64) -> Self;
    /// The bits `begin..end` of the key, shifted down (radix digit). Total for any range:
    /// bits past 64 read as 0, and an empty or reversed range gives 0 (callers check their
    /// ranges; this keeps a direct call from panicking).
    #[inline]
    fn digit(self, begin: u32, end: u32) -> u64 {
        let v = self.to_u64().checked_shr(begin).unwrap_or(0);
        let width = end.saturating_sub(begin);
        if width >= 64 {
            v
        } else {
            v & ((1u64 << width) - 1)
        }
    }
}

macro_rules! element {
    ($($t:ty, $unsigned:ty, $variant:ident => $name:literal),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const BITS: u32 = <$t>::BITS;
            #[inline]
            fn to_bits(self) -> u64 {
                self as $unsigned as u64
            }
            #[inline]
            fn from_bits(bits: u64) -> Self {
                bits as $unsigned as $t
            }
            fn column_ref<B: crate::Backend>(buf: &B::Buf<Self>) -> crate::ColumnRef<'_, B> {
                crate::ColumnRef::$variant(buf)
            }
            fn into_column<B: crate::Backend>(buf: B::Buf<Self>) -> crate::Column<B> {
                crate::Column::$variant(buf)
            }
            fn from_column<B: crate::Backend>(
                column: crate::Column<B>,
            ) -> std::result::Result<B::Buf<Self>, crate::Column<B>> {
                match column {
                    crate::Column::$variant(buf) => Ok(buf),
                    other => Err(other),
                }
            }
        }
    )*};
}
element!(
    u32, u32, U32 => "u32",
    u64, u64, U64 => "u64",
    i32, u32, I32 => "i32",
    i64, u64, I64 => "i64",
);

impl Key for u32 {
    const MAX: Self = u32::MAX;
    #[inline]
    fn to_u64(self) -> u64 {
        u64::from(self)
    }
    #[inline]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
}

impl Key for u64 {
    const MAX: Self = u64::MAX;
    #[inline]
    fn to_u64(self) -> u64 {
        self
    }
    #[inline]
    fn from_u64(v: u64) -> Self {
        v
    }
}

/// `s`'s elements as elements of `U`, bit for bit and without a copy, or `None` where the
/// widths differ. Why: joinkit keys a signed column by its bit pattern (see [`Key`]), which is
/// exactly this cast, so an `i64` key column can be handed over as `u64` keys as it is
/// instead of being converted into a fresh vector.
pub fn bit_cast_slice<T: Element, U: Element>(s: &[T]) -> Option<&[U]> {
    if size_of::<T>() != size_of::<U>() {
        return None;
    }
    bytemuck::try_cast_slice(s).ok()
}

/// [`bit_cast_slice`] of a vector it takes, in the same allocation (no copy, no new pages);
/// `v` back where the widths differ.
///
/// # Errors
/// `v` itself when `T` and `U` differ in size or alignment.
pub fn bit_cast_vec<T: Element, U: Element>(v: Vec<T>) -> Result<Vec<U>, Vec<T>> {
    if size_of::<T>() != size_of::<U>() || align_of::<T>() != align_of::<U>() {
        return Err(v);
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: `T` and `U` have one size and alignment, so the allocation's layout for
    // `capacity` elements of `T` is the one for as many of `U`, which the new vector frees; the
    // old one is never dropped (`ManuallyDrop`). Both are plain old data (`Pod`), so every
    // element of `T` is a valid `U`.
    Ok(unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<U>(), v.len(), v.capacity()) })
}

#[cfg(test)]
mod tests {
    use super::{Key, bit_cast_slice, bit_cast_vec};

    #[test]
    fn bit_casts_keep_the_bits_and_refuse_other_widths() {
        let signed = vec![-1i64, 0, i64::MIN, 42];
        let want: Vec<u64> = signed.iter().map(|&x| x as u64).collect();
        assert_eq!(bit_cast_slice::<i64, u64>(&signed), Some(&want[..]));
        assert_eq!(bit_cast_slice::<i64, u32>(&signed), None);
        let at = signed.as_ptr() as usize;
        let moved = bit_cast_vec::<i64, u64>(signed).unwrap();
        assert_eq!((moved.as_ptr() as usize, &moved), (at, &want));
        let narrow = vec![-2i32, 7];
        assert_eq!(
            bit_cast_vec::<i32, u32>(narrow.clone()).unwrap(),
            vec![u32::MAX - 1, 7]
        );
        assert_eq!(bit_cast_vec::<i32, u64>(narrow.clone()), Err(narrow));
        assert_eq!(bit_cast_vec::<u64, u64>(Vec::new()), Ok(Vec::new()));
    }

    #[test]
    fn digits_of_any_range() {
        assert_eq!(0xabcd_u32.digit(4, 12), 0xbc);
        assert_eq!(u64::MAX.digit(0, 64), u64::MAX);
        assert_eq!(u64::MAX.digit(60, 64), 0xf);
        // Past the width, empty and reversed ranges: 0, no panic.
        assert_eq!(u64::MAX.digit(64, 72), 0);
        assert_eq!(u32::MAX.digit(200, 300), 0);
        assert_eq!(u32::MAX.digit(8, 8), 0);
        assert_eq!(u32::MAX.digit(12, 4), 0);
    }
}
