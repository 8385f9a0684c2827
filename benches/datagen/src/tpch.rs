//! Key columns of TPC-H from the `tpchgen` crate (a Rust port of dbgen), generated in parallel
//! parts: `orders ⋈ lineitem` on the order key is the papers' real-data join.

use joinkit_cuda::{Error, Result, try_reserved};
use rayon::prelude::*;
use tpchgen::generators::{LineItemGenerator, OrderGenerator};

/// Lines per order on average (1 to 7, uniform), to size a `lineitem` column up front.
const LINES_PER_ORDER: f64 = 4.0;

/// A TPC-H column joinkit knows how to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `orders.o_orderkey` (unique, sparse: 8 of every 32 key values are used).
    OOrderkey,
    /// `orders.o_orderpriority` as a dictionary code 0..5 (`1-URGENT` .. `5-LOW`).
    OOrderpriority,
    /// `lineitem.l_orderkey` (sorted by order, 1-7 lines per order).
    LOrderkey,
    /// `lineitem.l_partkey`.
    LPartkey,
}

impl Column {
    /// The column's TPC-H name.
    pub fn name(self) -> &'static str {
        match self {
            Column::OOrderkey => "o_orderkey",
            Column::OOrderpriority => "o_orderpriority",
            Column::LOrderkey => "l_orderkey",
            Column::LPartkey => "l_partkey",
        }
    }

    /// Parses a TPC-H column name.
    pub fn from_name(name: &str) -> Option<Column> {
        [
            Column::OOrderkey,
            Column::OOrderpriority,
            Column::LOrderkey,
            Column::LPartkey,
        ]
        .into_iter()
        .find(|c| c.name() == name)
    }
}

/// Generates `column` at `scale_factor` as `u64` values, in table order (empty where the
/// scale factor is too small for one row).
///
/// # Errors
/// [`Error::InvalidArgument`] if `scale_factor` is not a finite number above 0 (infinity
/// would generate without end); [`Error::SizeOverflow`] when the host cannot allocate the
/// column, found before generating.
pub fn column(column: Column, scale_factor: f64) -> Result<Vec<u64>> {
    check_scale_factor(scale_factor)?;
    let orders = f64::from(OrderGenerator::SCALE_BASE) * scale_factor;
    let rows = match column {
        Column::OOrderkey | Column::OOrderpriority => orders,
        Column::LOrderkey | Column::LPartkey => orders * LINES_PER_ORDER,
    };
    // The whole column is reserved first: a scale factor past the host's memory is an error
    // now, not an abort after minutes of generation (`as` saturates; try_reserved refuses).
    let mut out = try_reserved::<u64>(rows as usize)?;
    // Enough parts to keep every thread busy; each part is generated independently.
    let parts = (rayon::current_num_threads() * 4).clamp(1, 256) as i32;
    let chunks: Vec<Vec<u64>> = (1..=parts)
        .into_par_iter()
        .map(|part| match column {
            Column::OOrderkey => OrderGenerator::new(scale_factor, part, parts)
                .iter()
                .map(|o| o.o_orderkey as u64)
                .collect(),
            Column::OOrderpriority => OrderGenerator::new(scale_factor, part, parts)
                .iter()
                .map(|o| priority_code(o.o_orderpriority))
                .collect(),
            Column::LOrderkey => LineItemGenerator::new(scale_factor, part, parts)
                .iter()
                .map(|l| l.l_orderkey as u64)
                .collect(),
            Column::LPartkey => LineItemGenerator::new(scale_factor, part, parts)
                .iter()
                .map(|l| l.l_partkey as u64)
                .collect(),
        })
        .collect();
    chunks.iter().for_each(|c| out.extend_from_slice(c));
    Ok(out)
}

/// The six columns of TPC-H Q4, encoded as the NVIDIA multi-GPU join talk did: 8-byte order
/// keys, dates as days since 1970-01-01 (Arrow's `Date32`), the priority as its code 0..5
/// (`1-URGENT` → 0). Both tables in TPC-H order: `o_orderkey` ascending, `lineitem` clustered
/// by (and sorted on) `l_orderkey`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Q4Columns {
    /// `orders.o_orderkey`.
    pub o_orderkey: Vec<u64>,
    /// `orders.o_orderdate`.
    pub o_orderdate: Vec<i32>,
    /// `orders.o_orderpriority` as a code.
    pub o_orderpriority: Vec<u32>,
    /// `lineitem.l_orderkey`.
    pub l_orderkey: Vec<u64>,
    /// `lineitem.l_commitdate`.
    pub l_commitdate: Vec<i32>,
    /// `lineitem.l_receiptdate`.
    pub l_receiptdate: Vec<i32>,
}

/// Generates Q4's columns at `scale_factor`, each table once, in parallel parts.
///
/// # Errors
/// As [`column()`]: a scale factor that is not a finite number above 0, or columns the host
/// cannot allocate (found before generating).
pub fn q4_columns(scale_factor: f64) -> Result<Q4Columns> {
    check_scale_factor(scale_factor)?;
    let orders = (f64::from(OrderGenerator::SCALE_BASE) * scale_factor) as usize;
    let lines = (orders as f64 * LINES_PER_ORDER) as usize;
    let mut out = Q4Columns {
        o_orderkey: try_reserved(orders)?,
        o_orderdate: try_reserved(orders)?,
        o_orderpriority: try_reserved(orders)?,
        l_orderkey: try_reserved(lines)?,
        l_commitdate: try_reserved(lines)?,
        l_receiptdate: try_reserved(lines)?,
    };
    let parts = (rayon::current_num_threads() * 4).clamp(1, 256) as i32;
    let chunks: Vec<Q4Columns> = (1..=parts)
        .into_par_iter()
        .map(|part| {
            let mut c = Q4Columns::default();
            for o in OrderGenerator::new(scale_factor, part, parts).iter() {
                c.o_orderkey.push(o.o_orderkey as u64);
                c.o_orderdate.push(o.o_orderdate.to_unix_epoch());
                c.o_orderpriority
                    .push(priority_code(o.o_orderpriority) as u32);
            }
            for l in LineItemGenerator::new(scale_factor, part, parts).iter() {
                c.l_orderkey.push(l.l_orderkey as u64);
                c.l_commitdate.push(l.l_commitdate.to_unix_epoch());
                c.l_receiptdate.push(l.l_receiptdate.to_unix_epoch());
            }
            c
        })
        .collect();
    for c in &chunks {
        out.o_orderkey.extend_from_slice(&c.o_orderkey);
        out.o_orderdate.extend_from_slice(&c.o_orderdate);
        out.o_orderpriority.extend_from_slice(&c.o_orderpriority);
        out.l_orderkey.extend_from_slice(&c.l_orderkey);
        out.l_commitdate.extend_from_slice(&c.l_commitdate);
        out.l_receiptdate.extend_from_slice(&c.l_receiptdate);
    }
    Ok(out)
}

/// A finite scale factor above 0 (infinity would generate without end).
fn check_scale_factor(scale_factor: f64) -> Result<()> {
    if scale_factor.is_finite() && scale_factor > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "TPC-H scale factor {scale_factor}: use a finite number above 0"
        )))
    }
}

/// `1-URGENT` → 0, ..., `5-LOW` → 4 (the leading digit).
fn priority_code(priority: &str) -> u64 {
    priority
        .bytes()
        .next()
        .map_or(0, |d| u64::from(d.saturating_sub(b'1')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_scale_orders_and_lineitems() {
        let o = column(Column::OOrderkey, 0.01).unwrap();
        assert_eq!(o.len(), 15_000);
        let mut sorted = o.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), o.len(), "o_orderkey is unique");
        let l = column(Column::LOrderkey, 0.01).unwrap();
        assert!(l.len() > 50_000 && l.len() < 70_000);
        assert!(
            l.windows(2).all(|w| w[0] <= w[1]),
            "l_orderkey comes in order"
        );
        let set: std::collections::HashSet<u64> = o.into_iter().collect();
        assert!(
            l.iter().all(|k| set.contains(k)),
            "every lineitem has its order"
        );
        let p = column(Column::OOrderpriority, 0.01).unwrap();
        assert!(p.iter().all(|&c| c < 5));
        assert_eq!(Column::from_name("l_partkey"), Some(Column::LPartkey));
    }

    #[test]
    fn q4_columns_agree_with_the_key_columns() {
        let q4 = q4_columns(0.01).unwrap();
        assert_eq!(q4.o_orderkey, column(Column::OOrderkey, 0.01).unwrap());
        assert_eq!(q4.l_orderkey, column(Column::LOrderkey, 0.01).unwrap());
        let prio = column(Column::OOrderpriority, 0.01).unwrap();
        assert!(
            q4.o_orderpriority
                .iter()
                .zip(&prio)
                .all(|(a, b)| u64::from(*a) == *b)
        );
        // 1992-01-01 is day 8035 since 1970; orders run to 1998-08-02, receipts a few months on.
        assert!(
            q4.o_orderdate
                .iter()
                .all(|d| (8035..8035 + 2406).contains(d))
        );
        assert_eq!(q4.l_commitdate.len(), q4.l_orderkey.len());
        assert!(
            q4.l_receiptdate
                .iter()
                .all(|d| (8035..8035 + 2600).contains(d))
        );
    }

    #[test]
    fn bad_scale_factors_are_errors() {
        for sf in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(
                    column(Column::OOrderkey, sf),
                    Err(Error::InvalidArgument(_))
                ),
                "{sf}"
            );
        }
        // More rows than any host holds: refused before generating, not an abort.
        assert!(matches!(
            column(Column::LOrderkey, 1e15),
            Err(Error::SizeOverflow(_))
        ));
        assert!(column(Column::OOrderkey, 1e-9).unwrap().is_empty());
    }
}
