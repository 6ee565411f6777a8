//! The router's clock: milliseconds of `CLOCK_BOOTTIME` since a
//! process-wide anchor, the same on every core of the node.
//!
//! Every duration the router measures (lock observation, route cache age,
//! the membership lease) is measured on this node's own clock, so no
//! decision compares two nodes' clocks, and a wall-clock step (NTP, an
//! operator) changes none of them. It is the boot-time clock rather than
//! the monotonic one because the lease must count the time the machine was
//! suspended: `CLOCK_MONOTONIC` stops during a suspend, so a node that
//! slept past its lease would wake believing it still holds it.
//! `CLOCK_BOOTTIME` counts the suspend; a pause neither clock counts (some
//! hypervisors' paused or migrated guests) is caught by [`JumpWatch`]
//! comparing them with the wall clock.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static ANCHOR_BOOT_MS: OnceLock<u64> = OnceLock::new();

/// Milliseconds of `clock` (a `CLOCK_*` id).
fn read_ms(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call's duration,
    // and the clock ids passed here exist on every Linux routerd runs on
    // (BOOTTIME since 2.6.39).
    let result = unsafe { libc::clock_gettime(clock, &mut now) };
    assert_eq!(result, 0, "clock_gettime({clock}) failed");
    now.tv_sec as u64 * 1000 + now.tv_nsec as u64 / 1_000_000
}

fn boot_ms() -> u64 {
    read_ms(libc::CLOCK_BOOTTIME)
}

fn anchor_ms() -> u64 {
    *ANCHOR_BOOT_MS.get_or_init(boot_ms)
}

/// Milliseconds since the anchor, at least 1 (0 is never a time).
pub fn now_ms() -> u64 {
    let anchor = anchor_ms();
    boot_ms().saturating_sub(anchor) + 1
}

/// The clock's reading at `at`, an `Instant` the caller read already (the
/// monotonic clock): now, less how long ago `at` was. Read fresh, so a
/// suspend between `at` and now is counted.
pub fn ms_at(at: Instant) -> u64 {
    let since = Instant::now().saturating_duration_since(at).as_millis() as u64;
    now_ms().saturating_sub(since).max(1)
}

/// The `Instant` at which this clock will read `ms` (now, if it already
/// has): timers are armed on the monotonic clock.
pub fn instant_at(ms: u64) -> Instant {
    let now = now_ms();
    Instant::now() + Duration::from_millis(ms.saturating_sub(now))
}

/// Watches for time that passed unseen by the monotonic clock: a suspend
/// (the boot-time clock ran on) or a pause no local clock counted (a
/// virtual machine stopped by its hypervisor, whose wall clock is set
/// forward when it resumes). Fed a reading every membership tick, it says
/// when the boot-time or the wall clock advanced more than `threshold_ms`
/// beyond the monotonic clock since the last one. A wall-clock step
/// forward by an operator or NTP looks the same and costs one needless
/// lapse of the lease; a step backward is ignored.
pub struct JumpWatch {
    threshold_ms: u64,
    last: Option<Readings>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readings {
    pub monotonic_ms: u64,
    pub boot_ms: u64,
    pub wall_ms: u64,
}

impl Readings {
    /// The three clocks now.
    pub fn now() -> Readings {
        Readings {
            monotonic_ms: read_ms(libc::CLOCK_MONOTONIC),
            boot_ms: read_ms(libc::CLOCK_BOOTTIME),
            wall_ms: read_ms(libc::CLOCK_REALTIME),
        }
    }
}

impl JumpWatch {
    pub fn new(threshold_ms: u64) -> JumpWatch {
        JumpWatch {
            threshold_ms,
            last: None,
        }
    }

    /// Takes a reading; returns what jumped, and by how much, if a clock
    /// ran ahead of the monotonic one by more than the threshold since the
    /// last reading.
    pub fn observe(&mut self, now: Readings) -> Option<String> {
        // The first reading has nothing to compare with.
        let last = self.last.replace(now)?;
        let monotonic = now.monotonic_ms.saturating_sub(last.monotonic_ms);
        let boot = now.boot_ms.saturating_sub(last.boot_ms);
        let wall = now.wall_ms.saturating_sub(last.wall_ms);
        if boot.saturating_sub(monotonic) > self.threshold_ms {
            return Some(format!(
                "the boot-time clock ran {} ms ahead of the monotonic clock (a suspend)",
                boot - monotonic
            ));
        }
        if wall.saturating_sub(monotonic) > self.threshold_ms {
            return Some(format!(
                "the wall clock ran {} ms ahead of the monotonic clock (a pause no local clock \
                 counted, or a wall-clock step)",
                wall - monotonic
            ));
        }
        None
    }
}

/// The period of a [`PauseTimer`]: a pause hidden from the clocks is seen
/// once the kernel counted more than `HIDDEN_PAUSE_MIN_MS` beyond them.
pub const PAUSE_TIMER_PERIOD_MS: u64 = 50;
pub const HIDDEN_PAUSE_MIN_MS: u64 = 2 * PAUSE_TIMER_PERIOD_MS;

/// Time that passed while every clock this process reads stood still:
/// a periodic kernel timer (`timerfd` on `CLOCK_BOOTTIME`) counts its
/// expirations in the kernel, where no interception of clock reads (a
/// library preloaded over `clock_gettime`, as libfaketime is) reaches, and
/// its count is compared with how far the router's clock advanced. On a
/// core the ring watches the timer (`shards::TimerTicks`): a check reads
/// it only once a period ended, so a loop that checks every turn makes no
/// system call per turn; elsewhere every check reads it.
pub struct PauseTimer {
    ticks: Option<shards::TimerTicks>,
    watch: PauseWatch,
}

impl PauseTimer {
    /// A timer; `None` inside when the kernel refuses one (then nothing is
    /// ever reported).
    pub fn new() -> PauseTimer {
        let period = Duration::from_millis(PAUSE_TIMER_PERIOD_MS);
        PauseTimer {
            ticks: shards::TimerTicks::new(libc::CLOCK_BOOTTIME, period).ok(),
            watch: PauseWatch::new(now_ms()),
        }
    }

    /// The length of a pause the router's clock (`now_ms`, read now) did
    /// not count, if one passed since the last read of the timer; the
    /// timer is read only if the core saw it fire since (reaped at its last
    /// kernel entry). A check that did not read observes nothing: the
    /// periods the ring has not reaped yet belong to the time before this
    /// reading, and counted after it they would look like a pause.
    pub fn check(&mut self, now_ms: u64) -> Option<u64> {
        let expirations = self.ticks.as_mut()?.take()?;
        self.watch.observe(now_ms, expirations)
    }

    /// [`PauseTimer::check`] reading the timer now (a system call), for a
    /// check between kernel entries: a pause inside a long turn is seen
    /// before the next entry.
    pub fn check_now(&mut self, now_ms: u64) -> Option<u64> {
        let expirations = self.ticks.as_mut()?.take_now();
        self.watch.observe(now_ms, expirations)
    }
}

impl Default for PauseTimer {
    fn default() -> Self {
        PauseTimer::new()
    }
}

/// [`PauseTimer`]'s arithmetic, sans IO: the kernel's count of periods
/// against the clock's advance since the last report.
pub struct PauseWatch {
    clock_from_ms: u64,
    counted_ms: u64,
}

impl PauseWatch {
    pub fn new(now_ms: u64) -> PauseWatch {
        PauseWatch {
            clock_from_ms: now_ms,
            counted_ms: 0,
        }
    }

    /// `expirations` more periods counted by the kernel, the clock reading
    /// `now_ms`: the hidden time when the kernel counted more than
    /// `HIDDEN_PAUSE_MIN_MS` beyond the clock (then counting starts again).
    pub fn observe(&mut self, now_ms: u64, expirations: u64) -> Option<u64> {
        self.counted_ms += expirations * PAUSE_TIMER_PERIOD_MS;
        let advanced = now_ms.saturating_sub(self.clock_from_ms);
        if self.counted_ms <= advanced + HIDDEN_PAUSE_MIN_MS {
            // The clock counts time; slide the window so that old slack
            // never hides a later pause.
            if advanced >= self.counted_ms {
                self.clock_from_ms = now_ms;
                self.counted_ms = 0;
            }
            return None;
        }
        let hidden = self.counted_ms - advanced;
        self.clock_from_ms = now_ms;
        self.counted_ms = 0;
        Some(hidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_the_kernel_counted_and_the_clock_did_not_is_reported() {
        let mut watch = PauseWatch::new(1_000);
        // Steady: the clock and the timer advance together (the timer a
        // period behind at most).
        assert_eq!(watch.observe(1_120, 2), None);
        assert_eq!(watch.observe(1_500, 8), None);
        // Stopped 5 s while every clock read was made to stand still.
        assert_eq!(watch.observe(1_510, 100), Some(5_010));
        // Counting starts again.
        assert_eq!(watch.observe(1_560, 1), None);
        // A late check (a busy core) is not a pause: the clock saw it.
        assert_eq!(watch.observe(3_560, 40), None);
    }

    #[test]
    fn this_machine_hides_no_pause() {
        let mut timer = PauseTimer::new();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(timer.check(now_ms()), None);
    }

    /// On a core: a turn that runs 300 ms without entering the kernel (a
    /// busy turn, counted by the clock) checks the timer before the ring
    /// reaped the periods it fired, and again after. The periods belong to
    /// the time before the first check: no pause.
    #[test]
    fn periods_reaped_after_a_long_turn_are_no_pause() {
        let (report, seen) = std::sync::mpsc::channel();
        let shutdown = shards::ShutdownHandle::new();
        let mut config = shards::RuntimeConfig::new(shards::CorePlacement::Unpinned(1));
        config.shutdown_deadline = Duration::from_secs(2);
        let runtime = shards::Runtime::start::<(), _, _>(&config, shutdown.clone(), move |core| {
            let report = report.clone();
            async move {
                core.ready();
                let mut timer = PauseTimer::new();
                shards::sleep(Duration::from_millis(10)).await;
                // Busy for six periods, with no kernel entry.
                std::thread::sleep(Duration::from_millis(300));
                let during = timer.check(now_ms());
                // The next turn enters the kernel and reaps the timer.
                shards::sleep(Duration::from_millis(10)).await;
                let after = timer.check(now_ms());
                let _ = report.send((during, after));
                core.shutdown().wait().await;
            }
        })
        .expect("runtime starts");
        let checks = seen.recv_timeout(Duration::from_secs(10)).expect("checked");
        shutdown.trigger();
        runtime.join().expect("core ends");
        assert_eq!(checks, (None, None), "a busy turn was taken for a pause");
    }

    #[test]
    fn readings_grow_and_convert_both_ways() {
        let first = now_ms();
        assert!(first >= 1);
        std::thread::sleep(Duration::from_millis(5));
        let later = now_ms();
        assert!(later >= first + 5);
        let at = Instant::now();
        let converted = ms_at(at);
        assert!(converted >= later && converted <= now_ms());
        assert!(instant_at(now_ms() + 50) > Instant::now() + Duration::from_millis(40));
        assert!(instant_at(1) <= Instant::now());
    }

    fn readings(monotonic_ms: u64, boot_ms: u64, wall_ms: u64) -> Readings {
        Readings {
            monotonic_ms,
            boot_ms,
            wall_ms,
        }
    }

    #[test]
    fn a_jump_of_the_boot_or_wall_clock_past_the_threshold_is_reported() {
        let mut watch = JumpWatch::new(100);
        assert_eq!(watch.observe(readings(1_000, 5_000, 90_000)), None);
        // Clocks that advance together (a busy core: 400 ms late) are fine.
        assert_eq!(watch.observe(readings(1_400, 5_400, 90_400)), None);
        // A suspend of 2 s: boot time runs on, monotonic does not.
        let suspend = watch.observe(readings(1_650, 7_650, 92_650)).unwrap();
        assert!(suspend.contains("boot-time"), "{suspend}");
        // A hypervisor pause of 3 s: only the wall clock saw it.
        let pause = watch.observe(readings(1_900, 7_900, 95_900)).unwrap();
        assert!(pause.contains("wall clock"), "{pause}");
        // Under the threshold, and a wall clock stepped back: nothing.
        assert_eq!(watch.observe(readings(2_150, 8_150, 96_240)), None);
        assert_eq!(watch.observe(readings(2_400, 8_400, 10_000)), None);
    }

    #[test]
    fn the_three_clocks_of_this_machine_advance_together() {
        let mut watch = JumpWatch::new(1_000);
        watch.observe(Readings::now());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(watch.observe(Readings::now()), None);
    }
}
