//! What to send: the request of each workload, the choice of connection in
//! open loop (uniform or zipfian), and the open-loop schedule.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::RngExt;

use crate::cli::{Distribution, Workload};
use crate::custom::{Custom, Vars, CUSTOM_REQUESTS_MAX};

/// Population a zipfian table covers at most (one entry per connection).
pub const ZIPF_POPULATION_MAX: usize = crate::cli::CONNECTIONS_MAX;

/// A kind of request the workloads send, measured apart from the others.
/// Both protocols speak these; `Say` is routerd's alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// routerd `sys.ping` (echoes the payload); Redis `PING [payload]`.
    Ping,
    /// routerd `player.get`; Redis `GET player:<id>`.
    Get,
    /// routerd `player.incr` by 1; Redis `INCR player:<id>`.
    Incr,
    /// routerd `room.say` with the send time as text.
    Say,
    /// The n-th request of a custom workload (`custom.rs`): its route and
    /// body are the workload's.
    Custom(u8),
}

impl Op {
    const BUILT_IN: usize = 4;
    pub const COUNT: usize = Op::BUILT_IN + CUSTOM_REQUESTS_MAX;
    pub const ALL: [Op; Op::COUNT] = {
        let mut all = [Op::Ping; Op::COUNT];
        all[1] = Op::Get;
        all[2] = Op::Incr;
        all[3] = Op::Say;
        let mut n = 0;
        while n < CUSTOM_REQUESTS_MAX {
            all[Op::BUILT_IN + n] = Op::Custom(n as u8);
            n += 1;
        }
        all
    };

    pub const fn index(self) -> usize {
        match self {
            Op::Ping => 0,
            Op::Get => 1,
            Op::Incr => 2,
            Op::Say => 3,
            Op::Custom(n) => Op::BUILT_IN + n as usize,
        }
    }

    /// The built-in requests' names; a custom request's is its workload's
    /// (`Args::op_name`).
    pub const fn name(self) -> &'static str {
        match self {
            Op::Ping => "ping",
            Op::Get => "get",
            Op::Incr => "incr",
            Op::Say => "say",
            Op::Custom(_) => "custom",
        }
    }
}

/// The per-thread request generator.
#[derive(Clone, Debug)]
pub struct Generator {
    workload: Workload,
    /// Cumulative weights of get, incr, ping.
    mix_cumulative: [u32; 3],
    body_bytes: usize,
    /// `--workload custom`: its requests.
    custom: Option<Arc<Custom>>,
    /// Custom requests made by this generator, the `{seq}` of the last.
    custom_seq: u64,
}

impl Generator {
    pub fn new(workload: Workload, mix: [u32; 3], body_bytes: usize) -> Generator {
        let mut mix_cumulative = [0u32; 3];
        let mut total = 0u32;
        for (slot, weight) in mix_cumulative.iter_mut().zip(mix) {
            total = total.saturating_add(weight);
            *slot = total;
        }
        Generator {
            workload,
            mix_cumulative,
            body_bytes,
            custom: None,
            custom_seq: 0,
        }
    }

    /// The requests `--workload custom` sends.
    pub fn with_custom(mut self, custom: Option<Arc<Custom>>) -> Generator {
        self.custom = custom;
        self
    }

    /// Picks the next request and writes its payload into `payload`: the
    /// ping bytes, or the send time a `room.say` carries as text (so
    /// receivers can time the fan-out), or a custom request's whole body
    /// for `player_id`. The protocol adds the rest (the delta, the key, the
    /// room).
    pub fn next(
        &mut self,
        rng: &mut SmallRng,
        now_ns: u64,
        player_id: u64,
        payload: &mut Vec<u8>,
    ) -> Op {
        payload.clear();
        match self.workload {
            Workload::Ping | Workload::PingRouted => self.ping(payload),
            Workload::Incr => Op::Incr,
            Workload::Mixed => {
                let total = self.mix_cumulative[2];
                let pick = rng.random_range(0..total);
                if pick < self.mix_cumulative[0] {
                    Op::Get
                } else if pick < self.mix_cumulative[1] {
                    Op::Incr
                } else {
                    self.ping(payload)
                }
            }
            Workload::Room => {
                payload.extend_from_slice(now_ns.to_string().as_bytes());
                Op::Say
            }
            Workload::Custom => {
                let custom = self
                    .custom
                    .as_ref()
                    .expect("validation loads the custom workload");
                let n = custom.pick(rng);
                self.custom_seq += 1;
                let vars = Vars {
                    player: player_id,
                    seq: self.custom_seq,
                };
                custom.requests[n].body.render(vars, payload);
                Op::Custom(n as u8)
            }
        }
    }

    fn ping(&self, payload: &mut Vec<u8>) -> Op {
        payload.resize(self.body_bytes, 0x5a);
        Op::Ping
    }
}

/// The send timestamp a `room.message` PUSH carries in its text, if the
/// body is one this generator wrote: `u64 room`, `u64 from`, decimal ns.
pub fn push_send_time_ns(body: &[u8]) -> Option<u64> {
    let text = body.get(16..)?;
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Picks a connection (one player each) for an open-loop request.
#[derive(Clone, Debug)]
pub enum Chooser {
    Uniform {
        population: usize,
    },
    /// Cumulative probabilities of ranks 0..n; rank 0 is the hottest.
    Zipfian {
        cdf: Vec<f64>,
    },
}

impl Chooser {
    pub fn new(distribution: Distribution, population: usize, s: f64) -> Chooser {
        assert!(population > 0, "a chooser needs a population");
        assert!(population <= ZIPF_POPULATION_MAX);
        match distribution {
            Distribution::Uniform => Chooser::Uniform { population },
            Distribution::Zipfian => {
                let mut cdf = Vec::with_capacity(population);
                let mut total = 0.0;
                for rank in 1..=population {
                    total += 1.0 / (rank as f64).powf(s);
                    cdf.push(total);
                }
                for p in &mut cdf {
                    *p /= total;
                }
                Chooser::Zipfian { cdf }
            }
        }
    }

    pub fn pick(&self, rng: &mut SmallRng) -> usize {
        match self {
            Chooser::Uniform { population } => rng.random_range(0..*population),
            Chooser::Zipfian { cdf } => {
                let u: f64 = rng.random();
                cdf.partition_point(|p| *p < u).min(cdf.len() - 1)
            }
        }
    }
}

/// The open-loop schedule: request k is due at `start + k * interval`,
/// whatever happened before (this is what makes the latency honest).
#[derive(Clone, Debug)]
pub struct Pacer {
    start_ns: u64,
    rate_per_s: f64,
    issued: u64,
}

impl Pacer {
    pub fn new(start_ns: u64, rate_per_s: f64) -> Pacer {
        assert!(rate_per_s > 0.0);
        Pacer {
            start_ns,
            rate_per_s,
            issued: 0,
        }
    }

    /// The intended send time of the next request.
    pub fn next_due_ns(&self) -> u64 {
        self.start_ns + (self.issued as f64 * 1e9 / self.rate_per_s) as u64
    }

    /// Returns the next intended time if it is at or before `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<u64> {
        let due = self.next_due_ns();
        if due <= now_ns {
            self.issued += 1;
            Some(due)
        } else {
            None
        }
    }
}

/// The players one connection owns under `--players`: connection `i` of
/// `C` owns player indexes i, i+C, i+2C, ... below the player count, so no
/// two connections ever hold one player, and it visits them round robin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlayerRing {
    first: u64,
    stride: u64,
    len: u64,
    cursor: u64,
}

impl PlayerRing {
    pub fn new(conn_index: usize, connections: usize, players: u64) -> PlayerRing {
        let first = conn_index as u64;
        let stride = connections as u64;
        assert!(first < players, "every connection owns a player");
        PlayerRing {
            first,
            stride,
            len: (players - first).div_ceil(stride),
            cursor: 0,
        }
    }

    /// Players this connection owns.
    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The index (from 0; ids add `--player-base`) of the current player.
    pub fn current(&self) -> u64 {
        self.first + self.cursor * self.stride
    }

    /// Moves to the next player and returns its index.
    pub fn advance(&mut self) -> u64 {
        self.cursor = (self.cursor + 1) % self.len;
        self.current()
    }
}

/// The room a connection (global index) joins, and whether it says.
pub fn room_role(conn_index: usize, room_size: usize, say_fraction: f64) -> (u64, bool) {
    let room_id = (conn_index / room_size) as u64 + 1;
    let member = conn_index % room_size;
    let sayers = ((room_size as f64) * say_fraction).ceil() as usize;
    (room_id, member < sayers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipfian_is_skewed_and_uniform_is_flat() {
        let mut rng = SmallRng::seed_from_u64(7);
        let zipf = Chooser::new(Distribution::Zipfian, 100, 0.99);
        let uniform = Chooser::new(Distribution::Uniform, 100, 0.99);
        let mut zipf_hits = [0u32; 100];
        let mut uniform_hits = [0u32; 100];
        for _ in 0..100_000 {
            zipf_hits[zipf.pick(&mut rng)] += 1;
            uniform_hits[uniform.pick(&mut rng)] += 1;
        }
        // Rank 0 of zipf(0.99) over 100 holds about 19% of the mass.
        assert!(zipf_hits[0] > 15_000, "{}", zipf_hits[0]);
        assert!(zipf_hits[0] > 20 * zipf_hits[99]);
        assert!(uniform_hits.iter().all(|h| (700..1300).contains(h)));
    }

    #[test]
    fn pacer_follows_the_clock_not_the_sender() {
        let mut pacer = Pacer::new(1_000, 1000.0); // one per ms
        assert_eq!(pacer.pop_due(999), None);
        assert_eq!(pacer.pop_due(1_000), Some(1_000));
        // The sender was away 10 ms: ten requests are due at once, each with
        // its own intended time.
        let due: Vec<u64> = std::iter::from_fn(|| pacer.pop_due(10_001_000)).collect();
        assert_eq!(due.len(), 10);
        assert_eq!(due[0], 1_001_000);
        assert_eq!(due[9], 10_001_000);
    }

    /// Every player belongs to exactly one connection, each connection
    /// visits all of its own in turn, and none is left without one.
    #[test]
    fn players_are_dealt_out_without_overlap() {
        for (connections, players) in [(1usize, 1u64), (3, 3), (3, 10), (4, 1000), (7, 8)] {
            let mut owner = vec![None; players as usize];
            for conn in 0..connections {
                let mut ring = PlayerRing::new(conn, connections, players);
                assert!(ring.len() >= 1);
                assert_eq!(ring.current(), conn as u64);
                for step in 0..ring.len() {
                    let player = if step == 0 {
                        ring.current()
                    } else {
                        ring.advance()
                    };
                    assert_eq!(owner[player as usize], None, "player {player} dealt twice");
                    owner[player as usize] = Some(conn);
                }
                // Round robin: back at the first one.
                assert_eq!(ring.advance(), conn as u64);
            }
            assert!(
                owner.iter().all(Option::is_some),
                "{connections} x {players}"
            );
        }
    }

    /// Every op has its own slot, and a custom request's body is rendered
    /// for the sending player with a seq that counts up.
    #[test]
    fn custom_requests_render_for_their_player() {
        let indexes: Vec<usize> = Op::ALL.iter().map(|op| op.index()).collect();
        assert_eq!(indexes, (0..Op::COUNT).collect::<Vec<_>>());
        assert_eq!(
            Op::ALL[Op::COUNT - 1],
            Op::Custom(CUSTOM_REQUESTS_MAX as u8 - 1)
        );
        let custom = Custom::from_text("1 a 7 u64:{player} u64:{seq}\n1 b 8", 64).expect("parses");
        let mut generator =
            Generator::new(Workload::Custom, [1, 1, 1], 0).with_custom(Some(Arc::new(custom)));
        let mut rng = SmallRng::seed_from_u64(2);
        let mut payload = Vec::new();
        let mut seqs = Vec::new();
        let mut counts = [0u32; 2];
        for _ in 0..100 {
            match generator.next(&mut rng, 0, 42, &mut payload) {
                Op::Custom(0) => {
                    counts[0] += 1;
                    assert_eq!(payload[..8], 42u64.to_le_bytes());
                    seqs.push(u64::from_le_bytes(
                        payload[8..].try_into().expect("8 bytes"),
                    ));
                }
                Op::Custom(1) => {
                    counts[1] += 1;
                    assert!(payload.is_empty());
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(counts[0] > 20 && counts[1] > 20, "{counts:?}");
        assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    }

    #[test]
    fn mixed_follows_weights_and_room_carries_time() {
        let mut generator = Generator::new(Workload::Mixed, [1, 0, 1], 4);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut payload = Vec::new();
        let mut counts = [0u32; Op::COUNT];
        for _ in 0..1000 {
            let op = generator.next(&mut rng, 0, 1, &mut payload);
            counts[op.index()] += 1;
            if op == Op::Ping {
                assert_eq!(payload, [0x5a; 4]);
            } else {
                assert!(payload.is_empty());
            }
        }
        assert_eq!(counts[Op::Incr.index()], 0);
        assert_eq!(counts[Op::Say.index()], 0);
        assert!(counts[Op::Get.index()] > 400 && counts[Op::Ping.index()] > 400);

        let mut room = Generator::new(Workload::Room, [1, 1, 1], 0);
        assert_eq!(room.next(&mut rng, 123_456, 1, &mut payload), Op::Say);
        // The PUSH body is room, from, then the text the sender wrote.
        let mut push = 9u64.to_le_bytes().to_vec();
        push.extend_from_slice(&5u64.to_le_bytes());
        push.extend_from_slice(&payload);
        assert_eq!(push_send_time_ns(&push), Some(123_456));
        assert_eq!(push_send_time_ns(b"short"), None);
        assert_eq!(room_role(0, 8, 0.25), (1, true));
        assert_eq!(room_role(2, 8, 0.25), (1, false));
        assert_eq!(room_role(9, 8, 0.25), (2, true));
    }
}
