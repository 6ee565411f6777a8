//! Resuming sessions across the cores of a node (docs/protocol.md, section
//! 12; the decisions are the core's, `core/resume.rs`).
//!
//! A session lives on the core its id names, and a new connection lands on
//! whichever core the kernel picks: so a connection that resumes a session
//! is a relay's *front*. Its session on the accepting core forwards every
//! frame it reads to the resumed session's core, which runs them as that
//! session's; the resumed session writes into a local outbox that a pump
//! task hands, batch by batch, to the front, whose connection writes them.
//! The session keeps its id and epoch, so every reference objects hold to
//! it keeps reaching the client. On the same core the relay is the same,
//! with both ends on one core.
//!
//! The cores talk through per-core mailboxes of jobs (closures run on the
//! receiving core, in the order posted), and find a token's core in the
//! node-wide token directory the cores keep up to date.

use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Instant;

use ring::rand::{SecureRandom, SystemRandom};
use wire::client::ErrorCode;

use super::GatewayHandle;
use crate::gateway::core::{HeldFrame, NewConnection, ResumeSettings, ResumeToken, TokenEvent};
use crate::gateway::outbox::{Outbox, WriterStep};
use crate::gateway::session_core;
use crate::gateway_addresses::Transport;

/// Work for one core, posted from any core.
type Job = Box<dyn FnOnce(&GatewayHandle) + Send>;

#[derive(Default)]
struct Mailbox {
    jobs: Vec<Job>,
    waker: Option<Waker>,
}

/// What the cores of a node share to resume sessions: the settings, the
/// token directory (a token to its session's id, which names the core)
/// and a mailbox per core.
pub struct ResumeHub {
    settings: ResumeSettings,
    directory: Mutex<HashMap<ResumeToken, u64>>,
    mailboxes: Box<[Mutex<Mailbox>]>,
}

impl Default for ResumeHub {
    /// Resuming turned off.
    fn default() -> Self {
        ResumeHub::new(ResumeSettings::OFF)
    }
}

impl ResumeHub {
    pub fn new(settings: ResumeSettings) -> ResumeHub {
        ResumeHub {
            settings,
            directory: Mutex::new(HashMap::new()),
            mailboxes: (0..=wire::ids::CORE_MAX)
                .map(|_| Mutex::new(Mailbox::default()))
                .collect(),
        }
    }

    pub fn settings(&self) -> ResumeSettings {
        self.settings
    }

    fn directory(&self) -> MutexGuard<'_, HashMap<ResumeToken, u64>> {
        self.directory
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn mailbox(&self, core: usize) -> MutexGuard<'_, Mailbox> {
        self.mailboxes[core]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `job` on core `core`'s gateway, after the jobs posted before it.
    fn post(&self, core: usize, job: Job) {
        let waker = {
            let mut mailbox = self.mailbox(core);
            mailbox.jobs.push(job);
            mailbox.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Runs the jobs other cores (and this one) post to this core's gateway.
pub(super) async fn mailbox_loop(gateway: GatewayHandle) {
    let hub = gateway.0.resume.clone();
    let core = gateway.0.core_id;
    loop {
        let jobs = poll_fn(|cx| {
            let mut mailbox = hub.mailbox(core);
            if mailbox.jobs.is_empty() {
                mailbox.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(std::mem::take(&mut mailbox.jobs))
        })
        .await;
        for job in jobs {
            job(&gateway);
        }
    }
}

/// A fresh resume token: 128 bits from the operating system's CSPRNG.
fn new_token() -> Option<ResumeToken> {
    let mut token = [0u8; 16];
    SystemRandom::new().fill(&mut token).ok()?;
    Some(token)
}

impl GatewayHandle {
    /// A version-2 login of `session_id` is pending: offers it resuming
    /// (its token comes with the login's answer).
    pub(super) fn offer_resume(&self, session_id: u64) {
        if !self.0.resume.settings().enabled() {
            return;
        }
        match new_token() {
            Some(token) => self.0.state.borrow_mut().offer_resume(session_id, token),
            None => tracing::warn!(session_id, "no random resume token: session not resumable"),
        }
    }

    /// `auth.resume` (request `seq`) read on `front`, a new connection's
    /// session: asks the core of the session `token` names to resume it
    /// through `front`; a token no core of the node holds is refused here.
    pub(super) fn begin_resume(&self, front: u64, seq: u32, token: ResumeToken, last_seen: u32) {
        let session = self.0.resume.directory().get(&token).copied();
        let Some(session) = session else {
            self.0.metrics.gateway.resumes_refused_unknown.inc();
            let refusal = crate::gateway::core::ResumeRefusal::Unknown;
            self.0.state.borrow_mut().relay_refused(front, seq, refusal);
            return;
        };
        // What the front reads from now on goes to the session's core,
        // after this request.
        let Some(transport) = self.0.state.borrow_mut().begin_relay(front, session) else {
            return; // the front's connection is gone: nothing to resume
        };
        let front_core = self.0.core_id;
        self.0.resume.post(
            session_core(session),
            Box::new(move |gateway: &GatewayHandle| {
                gateway.resume_here(token, last_seen, seq, front_core, front, transport)
            }),
        );
    }

    /// On the session's core: resumes it through `front` (on `front_core`,
    /// accepted on a listener of `transport`) or answers why not.
    fn resume_here(
        &self,
        token: ResumeToken,
        last_seen: u32,
        seq: u32,
        front_core: usize,
        front: u64,
        transport: Transport,
    ) {
        // The front's outbox bounds what waits for the client; this one
        // only carries batches to it.
        let outbox = Rc::new(Outbox::new(usize::MAX));
        let via = NewConnection {
            front,
            transport,
            outbox: outbox.clone(),
        };
        let resumed = self
            .0
            .state
            .borrow_mut()
            .resume(&token, last_seen, seq, via, Instant::now());
        match resumed {
            Ok(_) => {
                self.0.resume.post(
                    front_core,
                    Box::new(move |gateway: &GatewayHandle| {
                        gateway.0.state.borrow_mut().relay_established(front, seq);
                    }),
                );
                shards::spawn(pump(self.clone(), outbox, front_core, front)).detach();
            }
            Err(refusal) => self.0.resume.post(
                front_core,
                Box::new(move |gateway: &GatewayHandle| {
                    gateway
                        .0
                        .state
                        .borrow_mut()
                        .relay_refused(front, seq, refusal);
                }),
            ),
        }
        self.flush_notices();
    }

    /// On the session's core: a frame its front read, run as the session's.
    fn run_relayed(&self, session_id: u64, front: u64, frame: HeldFrame) {
        if !self.0.state.borrow().carries(session_id, front) {
            // Its resume was refused, or another connection took the
            // session since: the front is not the session.
            let (route_id, seq) = (frame.header.route_id, frame.header.seq);
            self.0.resume.post(
                session_core(front),
                Box::new(move |gateway: &GatewayHandle| {
                    gateway.0.state.borrow_mut().relay_error(
                        front,
                        route_id,
                        seq,
                        ErrorCode::AuthRequired,
                        "session not resumed: log in",
                    );
                }),
            );
            return;
        }
        let now = Instant::now();
        let ingress = self.0.state.borrow_mut().on_keyed_request(
            session_id,
            frame.header,
            frame.request_key,
            &frame.body,
            now,
        );
        if let Some(ingress) = ingress {
            self.deliver(ingress, now);
        }
        self.flush_notices();
    }

    /// Hands what the core's resume bookkeeping produced to the other
    /// cores: token directory changes, frames fronts read, fronts that
    /// ended.
    pub(super) fn flush_resume(&self) {
        let mut events = Vec::new();
        let mut relayed = Vec::new();
        let mut ended = Vec::new();
        {
            let mut state = self.0.state.borrow_mut();
            state.take_token_events(&mut events);
            state.take_relayed(&mut relayed);
            state.take_fronts_ended(&mut ended);
        }
        if !events.is_empty() {
            let mut directory = self.0.resume.directory();
            for event in events {
                match event {
                    TokenEvent::Held(token, session_id) => {
                        directory.insert(token, session_id);
                    }
                    TokenEvent::Forgotten(token) => {
                        directory.remove(&token);
                    }
                }
            }
        }
        for (session_id, front, frame) in relayed {
            self.0.resume.post(
                session_core(session_id),
                Box::new(move |gateway: &GatewayHandle| {
                    gateway.run_relayed(session_id, front, frame)
                }),
            );
        }
        for (session_id, front) in ended {
            self.0.resume.post(
                session_core(session_id),
                Box::new(move |gateway: &GatewayHandle| {
                    gateway.0.state.borrow_mut().front_ended(session_id, front);
                    gateway.flush_notices();
                }),
            );
        }
    }
}

/// Hands the resumed session's frames, batch by batch, to its front, and
/// its end (close or abort) once it comes.
async fn pump(gateway: GatewayHandle, outbox: Rc<Outbox>, front_core: usize, front: u64) {
    let mut batch = Vec::new();
    loop {
        let step = poll_fn(|cx| outbox.poll_take(cx, &mut batch)).await;
        let job: Job = match step {
            WriterStep::Write => {
                let answers = outbox.batch_holds_answers();
                let bytes = std::mem::take(&mut batch);
                Box::new(move |gateway: &GatewayHandle| {
                    gateway
                        .0
                        .state
                        .borrow_mut()
                        .relay_write(front, &bytes, answers);
                    gateway.flush_notices();
                })
            }
            WriterStep::Finish | WriterStep::Abort => {
                let abort = step == WriterStep::Abort;
                gateway.0.resume.post(
                    front_core,
                    Box::new(move |gateway: &GatewayHandle| {
                        gateway.0.state.borrow_mut().relay_end(front, abort);
                        gateway.flush_notices();
                    }),
                );
                return;
            }
        };
        gateway.0.resume.post(front_core, job);
    }
}
