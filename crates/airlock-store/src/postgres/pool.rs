//! The connections to PostgreSQL: a small pool driven by a runtime of the
//! store's own.
//!
//! The [`Store`](crate::Store) trait is synchronous and is called from the
//! hub's async tasks, as the SQLite backend is. tokio-postgres splits a
//! connection into a client (requests over a channel, no I/O of its own)
//! and a connection future that does the I/O; the connection futures run
//! on a current-thread runtime on a thread of the store's own, so the
//! caller's thread only waits for answers and no runtime is ever started
//! inside another.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_postgres::{Client, Config, NoTls};

use crate::{Result, StoreError};

/// The runtime that drives every connection of one store.
pub(crate) struct Driver {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Driver {
    pub(crate) fn start() -> Driver {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("airlock-store-postgres".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("building the store's runtime");
                let _ = handle_tx.send(rt.handle().clone());
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .expect("spawning the store's connection thread");
        Driver {
            handle: handle_rx.recv().expect("the store's runtime started"),
            stop: Some(stop),
        }
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Opens one connection, its I/O driven on `driver`.
pub(crate) async fn connect(driver: &tokio::runtime::Handle, config: &Config) -> Result<Client> {
    let config = config.clone();
    let opened = driver
        .spawn(async move {
            let (client, connection) = config.connect(NoTls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "a PostgreSQL connection ended");
                }
            });
            Ok::<_, tokio_postgres::Error>(client)
        })
        .await
        .map_err(|_| StoreError::WriterGone)?;
    Ok(opened?)
}

/// At most `size` connections, opened when first needed and reopened
/// when the server closed them: a replica that lost its database refuses
/// work with the connection error and recovers on its own.
pub(crate) struct Pool {
    config: Config,
    driver: tokio::runtime::Handle,
    idle: Mutex<Vec<Client>>,
    permits: Arc<Semaphore>,
}

/// One connection, lent out; it goes back to the pool when dropped,
/// unless it broke.
pub(crate) struct Lease<'a> {
    pool: &'a Pool,
    client: Option<Client>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Lease<'_> {
    pub(crate) fn client(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("a lease holds its client until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take().filter(|c| !c.is_closed()) {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(client);
        }
    }
}

/// How long a caller waits for a free connection before the store
/// reports itself unavailable.
const LEASE_WAIT: Duration = Duration::from_secs(10);

impl Pool {
    pub(crate) fn new(config: Config, driver: tokio::runtime::Handle, size: usize) -> Pool {
        Pool {
            config,
            driver,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
        }
    }

    pub(crate) async fn lease(&self) -> Result<Lease<'_>> {
        let acquire = self.permits.clone().acquire_owned();
        let mut timeout = self
            .driver
            .spawn(async { tokio::time::sleep(LEASE_WAIT).await });
        let permit = tokio::select! {
            p = acquire => p.map_err(|_| StoreError::WriterGone)?,
            _ = &mut timeout => return Err(StoreError::Unavailable(
                "every connection to the database is busy".into(),
            )),
        };
        timeout.abort();
        let idle = loop {
            let next = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match next {
                Some(c) if c.is_closed() => continue,
                other => break other,
            }
        };
        let client = match idle {
            Some(c) => c,
            None => connect(&self.driver, &self.config).await?,
        };
        Ok(Lease {
            pool: self,
            client: Some(client),
            _permit: permit,
        })
    }
}
