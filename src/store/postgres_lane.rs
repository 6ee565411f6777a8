//! The PostgreSQL backend's lanes: the dispatcher thread that cuts the
//! queue into group commits, and the connection workers that run them,
//! time them out and reconnect (see the module documentation of
//! `postgres` for the shape).

use super::*;

pub(super) fn driver_thread(
    target: Target,
    pool_size: usize,
    batch_max: usize,
    lanes: Lanes,
    ready: std::sync::mpsc::SyncSender<Result<(), OpenError>>,
) {
    let Some(runtime) = crate::store::bridge::driver_runtime("store-postgres-rt", &ready) else {
        return;
    };
    let pool = runtime.block_on(async {
        match tokio::time::timeout(OPEN_TIMEOUT, open_pool(&target, pool_size)).await {
            Ok(result) => result,
            Err(_) => Err(OpenError::Postgres(format!(
                "no connection pool within {}s",
                OPEN_TIMEOUT.as_secs()
            ))),
        }
    });
    let mut pool = match pool {
        Ok(pool) => pool,
        Err(error) => {
            drop(ready.send(Err(error)));
            return;
        }
    };
    let target = Arc::new(target);
    let Lanes { objects, members } = lanes;
    // The membership lane: its own connection, outside the pool, behind its
    // own dispatcher, one request a round trip. A heartbeat then never
    // waits for a pool connection nor rides in a group commit.
    let Some(members_conn) = pool.pop() else {
        drop(ready.send(Err(OpenError::Postgres(
            "no membership connection".to_string(),
        ))));
        return;
    };
    let (mut dispatcher, mut handles) = start_lane(&runtime, &target, pool, 0, objects, batch_max);
    let (mut members_dispatcher, members_handles) =
        start_lane(&runtime, &target, vec![members_conn], pool_size, members, 1);
    handles.extend(members_handles);
    drop(ready.send(Ok(())));
    std::thread::scope(|scope| {
        let runtime = &runtime;
        let members_thread = std::thread::Builder::new()
            .name("store-postgres-members".to_string())
            .spawn_scoped(scope, move || members_dispatcher.run(runtime));
        if let Err(error) = members_thread {
            tracing::error!(%error, "cannot start the postgres membership thread");
        }
        dispatcher.run(runtime);
        // Every Store handle is gone: close the workers' channels and let
        // each finish the batch it holds (bounded by that batch's
        // deadline).
        drop(dispatcher);
    });
    runtime.block_on(async {
        for handle in handles {
            drop(handle.await);
        }
    });
}

/// Starts a worker for each of `pool`'s connections (ids from `id_first`)
/// and the dispatcher that feeds them from `receiver`.
fn start_lane(
    runtime: &tokio::runtime::Runtime,
    target: &Arc<Target>,
    pool: Vec<Conn>,
    id_first: usize,
    receiver: Receiver<Request>,
    batch_max: usize,
) -> (Dispatcher, Vec<tokio::task::JoinHandle<()>>) {
    let connected = Arc::new(AtomicUsize::new(pool.len()));
    // Each worker has at most one `Idle` and one `Down` unread at a time.
    let (events, events_receiver) = mpsc::channel(2 * pool.len().max(1));
    let mut senders = Vec::with_capacity(pool.len());
    let mut handles = Vec::with_capacity(pool.len());
    let size = pool.len();
    for (index, conn) in pool.into_iter().enumerate() {
        let (sender, batches) = mpsc::channel(1);
        senders.push(sender);
        let id = id_first + index;
        let worker = Worker {
            id: index,
            target: target.clone(),
            conn: Some(conn),
            batches,
            events: events.clone(),
            connected: connected.clone(),
            rng: SmallRng::seed_from_u64(id as u64 ^ 0x5eed),
        };
        handles.push(runtime.spawn(worker.run()));
    }
    let dispatcher = Dispatcher {
        receiver,
        events: events_receiver,
        senders,
        idle: Vec::with_capacity(size),
        connected,
        down_at: None,
        batch_max,
    };
    (dispatcher, handles)
}

/// What a worker tells the dispatcher.
enum Event {
    /// Connected and waiting for a batch.
    Idle(usize),
    /// Lost its connection: the dispatcher re-checks whether any is up.
    Down,
}

/// What waiting for a connection gave.
enum Wait {
    Worker(usize),
    /// The request's deadline passed first.
    Expired,
    /// No connection is up: nothing can be sent.
    Unavailable,
}

struct Dispatcher {
    receiver: Receiver<Request>,
    events: mpsc::Receiver<Event>,
    senders: Vec<mpsc::Sender<Vec<Request>>>,
    /// Workers that said `Idle` and have not been given a batch since.
    idle: Vec<usize>,
    connected: Arc<AtomicUsize>,
    /// When a worker last said it lost its connection.
    down_at: Option<Instant>,
    batch_max: usize,
}

impl Dispatcher {
    fn run(&mut self, runtime: &tokio::runtime::Runtime) {
        while let Ok(first) = self.receiver.recv() {
            if first.deadline <= Instant::now() {
                first.expire();
                continue;
            }
            let worker = match self.wait_for_worker(runtime, first.deadline) {
                Wait::Worker(worker) => worker,
                Wait::Expired => {
                    first.expire();
                    continue;
                }
                Wait::Unavailable => {
                    first.answer(Err(BackendError::Unavailable));
                    continue;
                }
            };
            // Spread the queue over every idle connection: writers that
            // were answered together come back together, and one
            // connection taking them all would leave the others idle while
            // it runs a batch several times as long.
            let idle = self.idle.len() + 1;
            let share = (self.receiver.len() + 1).div_ceil(idle);
            let batch = self.collect(first, share.clamp(1, self.batch_max));
            if batch.is_empty() {
                self.idle.push(worker);
                continue;
            }
            match self
                .senders
                .get(worker)
                .map(|sender| sender.try_send(batch))
            {
                Some(Ok(())) => {}
                // A worker that said Idle holds no batch, so its one slot
                // is free; this is a worker that has stopped. The batch was
                // never sent.
                Some(Err(
                    mpsc::error::TrySendError::Full(batch)
                    | mpsc::error::TrySendError::Closed(batch),
                )) => {
                    tracing::error!(worker, "postgres store worker stopped");
                    for request in batch {
                        request.answer(Err(BackendError::Unavailable));
                    }
                }
                None => debug_assert!(false, "an idle event named no worker"),
            }
        }
    }

    /// The first request and the requests queued behind it, up to
    /// `weight_max` writes and `BATCH_BYTES_MAX`; requests past their
    /// deadline are answered here.
    fn collect(&self, first: Request, weight_max: usize) -> Vec<Request> {
        let now = Instant::now();
        let mut weight = first.weight();
        let mut bytes = state_bytes(&first);
        let mut batch = vec![first];
        while weight < weight_max && bytes < BATCH_BYTES_MAX {
            let Ok(request) = self.receiver.try_recv() else {
                break;
            };
            weight += request.weight();
            bytes += state_bytes(&request);
            batch.push(request);
        }
        let mut live = Vec::with_capacity(batch.len());
        for request in batch {
            if request.deadline <= now {
                request.expire();
            } else {
                live.push(request);
            }
        }
        live
    }

    fn wait_for_worker(&mut self, runtime: &tokio::runtime::Runtime, deadline: Instant) -> Wait {
        loop {
            while let Ok(event) = self.events.try_recv() {
                self.note(event);
            }
            if let Some(worker) = self.idle.pop() {
                return Wait::Worker(worker);
            }
            let mut until = deadline;
            if self.connected.load(Ordering::Acquire) == 0 {
                // A connection lost a moment ago is usually back within a
                // few milliseconds (a terminated backend, a restarted
                // server): wait that long for it. Past the grace the outage
                // is real, and every request is answered at once instead of
                // each waiting out its timeout in turn.
                match self.down_at.map(|down_at| down_at + RECONNECT_GRACE) {
                    Some(grace_end) if grace_end > Instant::now() => until = until.min(grace_end),
                    _ => return Wait::Unavailable,
                }
            }
            let until = tokio::time::Instant::from_std(until);
            let events = &mut self.events;
            // The timer is made inside `block_on`: tokio timers need the
            // runtime's context when they are created.
            let event =
                runtime.block_on(async { tokio::time::timeout_at(until, events.recv()).await });
            match event {
                Ok(Some(event)) => self.note(event),
                // Every worker is gone: nothing will ever be sent.
                Ok(None) => return Wait::Unavailable,
                Err(_elapsed) if Instant::now() >= deadline => return Wait::Expired,
                Err(_elapsed) => {}
            }
        }
    }

    fn note(&mut self, event: Event) {
        match event {
            Event::Idle(worker) => self.idle.push(worker),
            Event::Down => self.down_at = Some(Instant::now()),
        }
    }
}

fn state_bytes(request: &Request) -> usize {
    match &request.op {
        Op::Write(writes) => writes.iter().map(|write| write.state.len()).sum(),
        _ => 0,
    }
}

struct Worker {
    id: usize,
    target: Arc<Target>,
    conn: Option<Conn>,
    batches: mpsc::Receiver<Vec<Request>>,
    events: mpsc::Sender<Event>,
    /// Workers with a connection, shared with the dispatcher.
    connected: Arc<AtomicUsize>,
    rng: SmallRng,
}

impl Worker {
    async fn run(mut self) {
        loop {
            if self.conn.is_none() && !self.reconnect().await {
                return;
            }
            if self.events.send(Event::Idle(self.id)).await.is_err() {
                return;
            }
            let Some(batch) = self.batches.recv().await else {
                return;
            };
            self.serve(batch).await;
        }
    }

    async fn serve(&mut self, batch: Vec<Request>) {
        let Some(deadline) = batch.iter().map(|request| request.deadline).min() else {
            return;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        if self
            .conn
            .as_ref()
            .is_some_and(|conn| conn.client.is_closed())
        {
            // Closed while idle (a server restart, a terminated backend):
            // one attempt to replace it within the batch's time.
            self.drop_conn();
            if let Ok(Ok(conn)) = tokio::time::timeout_at(deadline, self.target.connect()).await {
                self.set_conn(conn);
            }
        }
        let Some(conn) = self.conn.as_ref() else {
            // Nothing was sent.
            for request in batch {
                request.answer(Err(BackendError::Unavailable));
            }
            return;
        };
        let run = postgres_batch::run(&conn.client, &conn.statements, &batch);
        match tokio::time::timeout_at(deadline, run).await {
            Ok(result) => {
                let drop_conn = result.connection_suspect || conn.client.is_closed();
                for (request, answer) in batch.into_iter().zip(result.answers) {
                    request.answer(answer);
                }
                if drop_conn {
                    self.drop_conn();
                }
            }
            Err(_elapsed) => {
                // The batch may be anywhere, its COMMIT included: every
                // write is Indeterminate.
                self.abandon().await;
                for request in batch {
                    request.expire();
                }
            }
        }
    }

    /// Stops the batch this worker's connection is running, for good,
    /// unless it is committing, and drops the connection. Dropping it
    /// alone would not do: the server holds the whole pipeline, `COMMIT`
    /// included, in its socket buffer, and a backend waiting for a row lock
    /// does not notice a closed socket, so the batch would still commit
    /// once the lock is free. A terminated backend rolls back whatever it
    /// has not committed, and `pg_terminate_backend` with a timeout returns
    /// once it has exited. A backend already committing is left to finish:
    /// terminating it could only cut its wait for a synchronous standby
    /// short, making the commit visible on the primary alone (see
    /// `sql::TERMINATE_UNLESS_COMMITTING`, and the race that remains). If
    /// the server cannot be reached within `ABANDON_TIMEOUT`, the batch is
    /// left to the server's own `statement_timeout` and
    /// `idle_in_transaction_session_timeout` (see `session_sql`).
    async fn abandon(&mut self) {
        let Some(pid) = self.conn.as_ref().map(|conn| conn.backend_pid) else {
            return;
        };
        self.drop_conn();
        let wait_ms = ABANDON_TIMEOUT.as_millis() as i64;
        // The wait event of a backend left to finish its commit; None
        // when it was terminated, or was gone already (no row).
        let terminate = async {
            let client = self.target.connect_raw().await?;
            let rows = client
                .query(sql::TERMINATE_UNLESS_COMMITTING, &[&pid, &wait_ms])
                .await?;
            let Some(row) = rows.first() else {
                return Ok::<_, tokio_postgres::Error>(None);
            };
            if row.try_get::<_, Option<bool>>(1)?.is_some() {
                return Ok(None);
            }
            Ok(Some(
                row.try_get::<_, Option<String>>(0)?.unwrap_or_default(),
            ))
        };
        match tokio::time::timeout(ABANDON_TIMEOUT, terminate).await {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(wait_event))) => {
                // `SyncRep`: the synchronous standby has not acknowledged
                // it; its row locks hold until it does.
                tracing::warn!(worker = self.id, pid, %wait_event,
                    "postgres store left a timed-out batch to finish its commit");
            }
            Ok(Err(error)) => {
                tracing::warn!(worker = self.id, error = %describe(&error),
                    "postgres store could not terminate a timed-out batch's backend");
            }
            Err(_) => {
                tracing::warn!(
                    worker = self.id,
                    "postgres store could not reach the server to terminate a timed-out batch"
                );
            }
        }
    }

    fn set_conn(&mut self, conn: Conn) {
        debug_assert!(self.conn.is_none());
        self.conn = Some(conn);
        self.connected.fetch_add(1, Ordering::AcqRel);
    }

    fn drop_conn(&mut self) {
        if self.conn.take().is_some() {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            // A full channel already holds events that wake the dispatcher.
            drop(self.events.try_send(Event::Down));
        }
    }

    /// Reconnects with backoff until connected (true) or the dispatcher is
    /// gone (false).
    async fn reconnect(&mut self) -> bool {
        let mut delay = RECONNECT_DELAY_FIRST;
        let mut attempts: u64 = 0;
        loop {
            if self.batches.is_closed() {
                return false;
            }
            attempts += 1;
            match tokio::time::timeout(CONNECT_TIMEOUT, self.target.connect()).await {
                Ok(Ok(conn)) => {
                    self.set_conn(conn);
                    if attempts > 1 {
                        tracing::info!(worker = self.id, attempts, "postgres store reconnected");
                    }
                    return true;
                }
                Ok(Err(error)) if attempts == 1 => {
                    tracing::warn!(worker = self.id, error = %describe(&error),
                        "postgres store connection lost; reconnecting with backoff");
                }
                Err(_) if attempts == 1 => {
                    tracing::warn!(
                        worker = self.id,
                        "postgres store connect timed out; retrying"
                    );
                }
                _ => {}
            }
            let wait = self.rng.random_range(delay / 2..=delay);
            tokio::time::sleep(wait).await;
            delay = (delay * 2).min(RECONNECT_DELAY_LAST);
        }
    }
}
