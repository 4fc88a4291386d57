//! HTTP connections served on lanes: single-threaded runtimes, one per core, each on a thread
//! of its own. A connection is handed to one lane when it is accepted and stays there, with
//! every task its requests start (a response's turn and its stream).
//!
//! Why: on tokio's work-stealing runtime a streamed turn's tasks (the connection, the turn,
//! the response following it, the upstream connection) wake one another, and a worker that
//! has slept through the model's time is woken to steal some of them. Each such wake of a
//! sleeping core, and the state then handed between cores, cost the Responses front ~0.4 ms
//! a turn with a model answering in 100 ms (`bench --serve --front responses`, 2 cores). On
//! a lane a turn's wake-ups stay on one thread. The cost: a lane's connections share its one
//! core (connections are dealt to lanes in turn).

use std::io;
use std::net::TcpStream as StdTcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::util::sync::lock;

/// How long a stopping lane waits for blocking work its connections started.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long accepting pauses after an error that is not one connection's (out of descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// The lane serving a request's connection, in the request's extensions: which of the
/// upstream's connection pools its work uses (see
/// [`crate::backend::ResponsesBackend::with_connection_pools`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lane(pub usize);

/// What a lane is told.
enum LaneMsg {
    /// Serve the connections that follow with this router.
    Route(Router),
    /// Serve this connection.
    Serve(StdTcpStream),
    /// End the connections gracefully (the requests in flight are answered), then say so.
    Drain(oneshot::Sender<()>),
    /// Stop the lane.
    Stop,
}

/// The lanes: their queues and threads.
pub(crate) struct Lanes {
    queues: Vec<mpsc::UnboundedSender<LaneMsg>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    next: AtomicUsize,
}

impl Lanes {
    /// `count` lanes (at least one), their threads named `name-N`.
    pub(crate) fn start(count: usize, name: &str) -> io::Result<Lanes> {
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for index in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (queue, messages) = mpsc::unbounded_channel();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    runtime.block_on(run_lane(index, messages));
                    runtime.shutdown_timeout(STOP_WAIT);
                })?;
            queues.push(queue);
            threads.push(thread);
        }
        Ok(Lanes {
            queues,
            threads: Mutex::new(threads),
            next: AtomicUsize::new(0),
        })
    }

    /// One lane per core the process may use ([`per_core`]).
    pub(crate) fn per_core(name: &str) -> io::Result<Lanes> {
        Lanes::start(per_core(), name)
    }

    /// How many lanes there are.
    pub(crate) fn count(&self) -> usize {
        self.queues.len()
    }

    /// Accepts connections on `listener` and deals them to the lanes, each served with
    /// `router` (`TCP_NODELAY` set; each request carries its [`Lane`]), until `shutdown`
    /// resolves; then stops accepting and returns once every connection has ended
    /// gracefully. The lanes run on (tasks the connections started go on) until
    /// [`Lanes::stop`].
    pub(crate) async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        router: Router,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        for (index, queue) in self.queues.iter().enumerate() {
            let routed = router.clone().layer(Extension(Lane(index)));
            if queue.send(LaneMsg::Route(routed)).is_err() {
                return Err(io::Error::other(format!("serve: lane {index} has stopped")));
            }
        }
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        if let Err(error) = stream.set_nodelay(true) {
                            tracing::debug!(%error, "serve: TCP_NODELAY not set on a connection");
                        }
                        match stream.into_std() {
                            Ok(stream) => self.deal(LaneMsg::Serve(stream)),
                            Err(error) => {
                                tracing::warn!(%error, "serve: a connection could not leave the accepting runtime; it is dropped");
                            }
                        }
                    }
                    Err(error) if is_connection_error(&error) => {}
                    Err(error) => {
                        tracing::error!(%error, "serve: accepting a connection failed; pausing");
                        tokio::time::sleep(ACCEPT_PAUSE).await;
                    }
                },
                () = &mut shutdown => break,
            }
        }
        drop(listener);
        let mut drained = Vec::with_capacity(self.queues.len());
        for queue in &self.queues {
            let (done, done_rx) = oneshot::channel();
            if queue.send(LaneMsg::Drain(done)).is_ok() {
                drained.push(done_rx);
            }
        }
        for done in drained {
            let _ = done.await;
        }
        Ok(())
    }

    /// Ends the lanes and their threads. Tasks their connections started and that still run
    /// are dropped, as at the process's end: the Responses front stops its lanes last, after
    /// its harness has shut down. Blocking work is waited for at most [`STOP_WAIT`].
    pub(crate) async fn stop(&self) {
        let threads = std::mem::take(&mut *lock(&self.threads));
        for queue in &self.queues {
            // A lane already gone has nothing more to stop.
            let _ = queue.send(LaneMsg::Stop);
        }
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }

    fn deal(&self, msg: LaneMsg) {
        // Never a division by zero: there is at least one lane.
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        let sent = self.queues.get(index).map(|queue| queue.send(msg));
        if !matches!(sent, Some(Ok(()))) {
            tracing::warn!(
                lane = index,
                "serve: a lane has stopped; the connection is dropped"
            );
        }
    }
}

/// A lane: serves the connections it is given; told to drain, it asks each to end gracefully
/// (hyper answers the request in flight, then closes) and says when all have.
async fn run_lane(lane: usize, mut messages: mpsc::UnboundedReceiver<LaneMsg>) {
    let mut routed: Option<Router> = None;
    let mut connections = Connections::new();
    while let Some(msg) = messages.recv().await {
        match msg {
            LaneMsg::Route(router) => routed = Some(router),
            LaneMsg::Serve(stream) => {
                // Told before any connection (see `Lanes::serve`).
                let Some(router) = routed.clone() else {
                    continue;
                };
                match tokio::net::TcpStream::from_std(stream) {
                    Ok(stream) => connections.serve(stream, router, lane),
                    Err(error) => {
                        tracing::warn!(%error, "serve: a connection could not join its lane");
                    }
                }
            }
            LaneMsg::Drain(done) => {
                std::mem::replace(&mut connections, Connections::new())
                    .drain()
                    .await;
                let _ = done.send(());
            }
            LaneMsg::Stop => return,
        }
    }
}

/// A lane's connections: each in a task of its own, told to end gracefully on `drain`.
struct Connections {
    draining: watch::Sender<bool>,
    tasks: TaskTracker,
}

impl Connections {
    fn new() -> Connections {
        Connections {
            draining: watch::Sender::new(false),
            tasks: TaskTracker::new(),
        }
    }

    /// Serves `stream` with `router` (HTTP/1.1, with upgrades, as `axum::serve`), in a span
    /// naming its peer and `lane`.
    fn serve(&self, stream: tokio::net::TcpStream, router: Router, lane: usize) {
        let mut draining = self.draining.subscribe();
        let peer = stream.peer_addr().ok();
        let span = tracing::debug_span!("connection", ?peer, lane);
        let connection = async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection_with_upgrades(
                TokioIo::new(stream),
                TowerToHyperService::new(router),
            );
            tokio::pin!(connection);
            let mut told = false;
            loop {
                tokio::select! {
                    ended = connection.as_mut() => {
                        if let Err(error) = ended {
                            tracing::debug!(%error, "serve: a connection ended with an error");
                        }
                        return;
                    }
                    // Told once (the sender is kept until the connections are drained).
                    _ = draining.wait_for(|draining| *draining), if !told => {
                        told = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        };
        self.tasks.spawn(connection.instrument(span));
    }

    /// Asks every connection to end gracefully; returns once all have.
    async fn drain(self) {
        self.draining.send_replace(true);
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// How many lanes [`Lanes::per_core`] starts: one per core the process may use.
pub(crate) fn per_core() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// An accept error of one connection (it went away before it was accepted), not of the
/// listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Instant;

    use axum::routing::get;

    use super::*;

    /// A router answering with the thread that served the request and the lane it carries.
    fn where_served() -> Router {
        Router::new()
            .route(
                "/",
                get(|Extension(Lane(lane)): Extension<Lane>| async move {
                    let thread = std::thread::current().name().unwrap_or("").to_owned();
                    format!("{thread} {lane}")
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    "done"
                }),
            )
    }

    struct Serving {
        url: String,
        stop: Option<oneshot::Sender<()>>,
        served: tokio::task::JoinHandle<io::Result<()>>,
        lanes: std::sync::Arc<Lanes>,
    }

    async fn serve(count: usize) -> Serving {
        let lanes = std::sync::Arc::new(Lanes::start(count, "test-lane").unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = lanes.clone();
        let served = tokio::spawn(async move {
            serving
                .serve(listener, where_served(), async move {
                    let _ = stopped.await;
                })
                .await
        });
        Serving {
            url,
            stop: Some(stop),
            served,
            lanes,
        }
    }

    async fn get_text(client: &reqwest::Client, url: &str) -> String {
        let response = client.get(url).send().await.unwrap();
        assert!(response.status().is_success());
        response.text().await.unwrap()
    }

    /// A connection's requests are all served on one lane's thread and carry that lane; the
    /// next connection goes to the next lane.
    #[tokio::test]
    async fn a_connection_stays_on_its_lane_and_connections_are_dealt_in_turn() {
        let serving = serve(2).await;
        assert_eq!(serving.lanes.count(), 2);
        // A reqwest client keeps one connection for sequential requests.
        let first = reqwest::Client::new();
        let a = get_text(&first, &format!("{}/", serving.url)).await;
        let b = get_text(&first, &format!("{}/", serving.url)).await;
        assert_eq!(a, b, "one connection, one lane");
        assert_eq!(a, "test-lane-0 0");
        let second = reqwest::Client::new();
        let c = get_text(&second, &format!("{}/", serving.url)).await;
        assert_eq!(c, "test-lane-1 1");
        let third = reqwest::Client::new();
        let d = get_text(&third, &format!("{}/", serving.url)).await;
        assert_eq!(d, "test-lane-0 0", "dealt in turn");
        let _ = get_text(&first, &format!("{}/", serving.url)).await;
        drop(serving.stop);
        serving.served.await.unwrap().unwrap();
        serving.lanes.stop().await;
    }

    /// At shutdown the listener closes, a request in flight is still answered whole, and
    /// `serve` returns once it is.
    #[tokio::test]
    async fn shutdown_answers_the_request_in_flight_and_stops_accepting() {
        let mut serving = serve(2).await;
        let client = reqwest::Client::new();
        let url = format!("{}/slow", serving.url);
        let in_flight = tokio::spawn({
            let client = client.clone();
            async move { get_text(&client, &url).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let asked = Instant::now();
        let _ = serving.stop.take().unwrap().send(());
        assert_eq!(in_flight.await.unwrap(), "done");
        serving.served.await.unwrap().unwrap();
        assert!(
            asked.elapsed() >= Duration::from_millis(100),
            "serve returned only after the slow request was answered"
        );
        let refused = reqwest::Client::new()
            .get(format!("{}/", serving.url))
            .send()
            .await;
        assert!(refused.is_err(), "no longer accepting: {refused:?}");
        serving.lanes.stop().await;
    }

    /// `stop` ends the lanes' threads.
    #[tokio::test]
    async fn stop_ends_the_lane_threads() {
        let lanes = Lanes::start(3, "test-stop").unwrap();
        assert_eq!(lanes.count(), 3);
        lanes.stop().await;
        assert!(lock(&lanes.threads).is_empty());
        for queue in &lanes.queues {
            assert!(queue.is_closed(), "the lane's thread has ended");
        }
    }
}
