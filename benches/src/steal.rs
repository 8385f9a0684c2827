//! The host's steal time: CPU time the hypervisor gave to other guests while this one had work
//! (Linux `/proc/stat`). On a shared virtual machine it slowed some processes of the same CPU
//! join by up to 1.35× (docs/results/joins.md): a parallel join waits for its slowest thread,
//! so a small share of stolen time can cost it much more than that share. Every sweep point
//! records it, so that a noisy measurement can be told from slow code.

use std::fs;

/// The host's CPU time counters since boot, in ticks summed over its CPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HostTicks {
    /// Time stolen by the hypervisor.
    steal: u64,
    /// Every kind of time counted (user, nice, system, idle, iowait, irq, softirq, steal).
    total: u64,
}

impl HostTicks {
    /// The counters now, where the system has them (Linux; not in every container).
    pub(crate) fn now() -> Option<HostTicks> {
        parse(&fs::read_to_string("/proc/stat").ok()?)
    }

    /// The share of the CPUs' time stolen between `self` and `later`, in percent; `None` where
    /// no time was counted.
    pub(crate) fn steal_percent_until(&self, later: &HostTicks) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        let steal = later.steal.checked_sub(self.steal)?;
        (total > 0).then(|| 100.0 * steal as f64 / total as f64)
    }
}

/// The counters of `/proc/stat`'s first line, `cpu  user nice system idle iowait irq softirq
/// steal ...` (guest time is counted inside user time, so it is not added again).
fn parse(stat: &str) -> Option<HostTicks> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (ticks.len() == 8).then(|| HostTicks {
        steal: ticks[7],
        total: ticks.iter().sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::{HostTicks, parse};

    #[test]
    fn reads_the_first_line_of_proc_stat() {
        let stat = "cpu  100 5 50 800 10 1 4 30 0 0\ncpu0 50 2 25 400 5 0 2 15 0 0\n";
        let t = parse(stat).unwrap();
        assert_eq!(
            t,
            HostTicks {
                steal: 30,
                total: 1000
            }
        );
        let later = HostTicks {
            steal: 40,
            total: 1400,
        };
        assert_eq!(t.steal_percent_until(&later), Some(2.5));
        assert_eq!(t.steal_percent_until(&t), None);
    }

    #[test]
    fn refuses_what_is_not_the_cpu_line() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("intr 1 2 3 4 5 6 7 8"), None);
        // Kernels before 2.6.11 count no steal time.
        assert_eq!(parse("cpu  100 5 50 800 10 1 4"), None);
        assert_eq!(parse("cpu  100 5 x 800 10 1 4 30"), None);
    }
}
