//! Q4 on several GPUs of one process, a rank each, through NCCL: the tables split by order
//! key, the counts summed by an all-reduce.

use joinkit_comm::nccl::NcclComm;
use joinkit_comm::{CommConfig, Communicator, ReduceOp};
use joinkit_cuda::CudaBackend;

use super::*;

/// One rank's runs: its time of each, and the summed counts.
struct RankRuns {
    ms: Vec<f64>,
    counts: [u64; 5],
    rows: (usize, usize),
}

fn rank(
    b: &CudaBackend,
    comm: &NcclComm,
    part: &Q4Columns,
    args: &TpchQ4Args,
    runs: usize,
) -> Result<RankRuns> {
    let copies = args.replicate as usize;
    let mut run: Box<dyn FnMut() -> Result<Q4Run>> = match args.inputs {
        Inputs::Device => {
            let t = Q4Tables::upload(b, part, copies)?;
            Box::new(move || Ok(q4(b, &t, args.date, SemiJoin::Sorted)?))
        }
        Inputs::Host => {
            let h = host::PinnedQ4::pin(b, part, args.compress, copies, args.chunk_rows)?;
            Box::new(move || Ok(host::q4_streamed(b, &h, args.date)?))
        }
    };
    let mut ms = Vec::with_capacity(runs);
    let mut counts = [0u64; 5];
    for _ in 0..runs {
        comm.barrier()?; // every rank starts together
        let r = run()?;
        ms.push(r.total_ms());
        let summed = comm.all_reduce(&r.counts, ReduceOp::Sum)?;
        counts.iter_mut().zip(summed).for_each(|(c, s)| *c = s);
    }
    let rows = (
        part.o_orderkey.len() * copies,
        part.l_orderkey.len() * copies,
    );
    Ok(RankRuns { ms, counts, rows })
}

pub(super) fn measure(columns: Q4Columns, args: &TpchQ4Args, ctx: &mut Ctx) -> Result<()> {
    if args.semi_join != [SemiJoin::Sorted] {
        return Err(BenchError::Usage(
            "--gpus runs the sorted plan (--semi-join sorted)".into(),
        ));
    }
    let parts = split_by_order(&columns, args.gpus.len())?;
    drop(columns);
    let backends = args
        .gpus
        .iter()
        .map(|&g| CudaBackend::new(g))
        .collect::<joinkit_cuda::Result<Vec<_>>>()?;
    let comms = NcclComm::init_all(&backends, CommConfig::default())?;
    let runs = ctx.runs(10);
    let total_runs = runs.warmup + runs.repeat;
    let results: Vec<Result<RankRuns>> = std::thread::scope(|s| {
        let handles: Vec<_> = backends
            .iter()
            .zip(comms)
            .zip(&parts)
            .map(|((b, comm), part)| s.spawn(move || rank(b, &comm, part, args, total_runs)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Ranks("a rank panicked".into())))
            })
            .collect()
    });
    let ranks = results.into_iter().collect::<Result<Vec<_>>>()?;
    // A run's time is its slowest rank's; the median run by that, with its fastest rank.
    let mut by_run: Vec<(f64, f64)> = (runs.warmup..total_runs)
        .map(|i| {
            let ms = ranks.iter().map(|r| r.ms[i]);
            (ms.clone().fold(0.0, f64::max), ms.fold(f64::MAX, f64::min))
        })
        .collect();
    by_run.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (total, fastest) = by_run[by_run.len() / 2];
    let (orders, lines) = ranks
        .iter()
        .fold((0, 0), |a, r| (a.0 + r.rows.0, a.1 + r.rows.1));
    let input = ((orders + lines) * 16) as f64;
    let mut row = Row::new("tpch-q4")
        .with("sf", args.sf.map_or("files".to_string(), |s| s.to_string()))
        .with("copies", args.replicate)
        .with("gpus", args.gpus.len())
        .with(
            "inputs",
            match (args.inputs, args.compress) {
                (Inputs::Device, _) => "device",
                (Inputs::Host, false) => "host",
                (Inputs::Host, true) => "host, compressed",
            },
        )
        .with("orders", orders)
        .with("lineitems", lines);
    for (name, n) in PRIORITIES.iter().zip(ranks[0].counts) {
        row = row.with(name, n);
    }
    ctx.report.row(
        row.with("total ms", total)
            .with("input GB/s", input / (total * 1e-3) / 1e9)
            .with("fastest rank ms", fastest),
    );
    Ok(())
}
