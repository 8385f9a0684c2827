//! The host's steal time: CPU time the hypervisor spent elsewhere (other guests, its own work)
//! while this guest had work to run (Linux `/proc/stat`). On a shared virtual machine it
//! slowed some processes of the same CPU join by up to 1.35× (docs/results/joins.md): a
//! parallel join waits for its slowest thread, so a small share of stolen time can cost it
//! much more than that share. Every sweep point records it, so that a noisy measurement can be
//! told from slow code.

use std::fs::File;
use std::io::{BufRead, BufReader};

/// The host's CPU time counters since boot, in ticks (10 ms of one CPU) summed over its CPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HostTicks {
    /// Time stolen by the hypervisor.
    steal: u64,
    /// Time the CPUs had work: every kind counted but idle and iowait (user, nice, system,
    /// irq, softirq, steal). Idle CPUs lose nothing to steal, so they do not dilute the share.
    busy: u64,
}

/// Steal over one stretch of time: its ticks and its share of the busy ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Steal {
    pub(crate) ticks: u64,
    pub(crate) percent: f64,
}

impl HostTicks {
    /// The counters now, where the system has them (Linux; not in every container).
    pub(crate) fn now() -> Option<HostTicks> {
        let mut line = String::new();
        BufReader::new(File::open("/proc/stat").ok()?)
            .read_line(&mut line)
            .ok()?;
        parse(&line)
    }

    /// The steal between `self` and `later`; `None` where no busy time was counted or a
    /// counter went backwards.
    pub(crate) fn steal_until(&self, later: &HostTicks) -> Option<Steal> {
        let busy_ticks = later.busy.checked_sub(self.busy)?;
        let ticks = later.steal.checked_sub(self.steal)?;
        (busy_ticks > 0).then(|| Steal {
            ticks,
            percent: 100.0 * ticks as f64 / busy_ticks as f64,
        })
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
    let &[user, nice, system, _idle, _iowait, irq, softirq, steal] = &ticks[..] else {
        return None;
    };
    Some(HostTicks {
        steal,
        busy: user + nice + system + irq + softirq + steal,
    })
}

#[cfg(test)]
mod tests {
    use super::{HostTicks, Steal, parse};

    #[test]
    fn reads_the_first_line_of_proc_stat() {
        let stat = "cpu  100 5 50 800 10 1 4 30 0 0\ncpu0 50 2 25 400 5 0 2 15 0 0\n";
        let t = parse(stat).unwrap();
        assert_eq!(
            t,
            HostTicks {
                steal: 30,
                busy: 190
            }
        );
        // 10 ticks stolen of 400 busy; the 600 idle ticks between do not count.
        let later = HostTicks {
            steal: 40,
            busy: 590,
        };
        assert_eq!(
            t.steal_until(&later),
            Some(Steal {
                ticks: 10,
                percent: 2.5
            })
        );
        assert_eq!(t.steal_until(&t), None);
        let earlier = HostTicks {
            steal: 20,
            busy: 100,
        };
        assert_eq!(t.steal_until(&earlier), None);
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
