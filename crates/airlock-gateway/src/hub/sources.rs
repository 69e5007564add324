//! The sources part of the hub: the upstream connections, the merged
//! catalog built from what they offer (swapped whole when one changes), and
//! the catalog's copy in the store.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use airlock_store::{CatalogKind, Store};
use airlock_upstream::Source;

use crate::catalog::{Catalog, Offer};

pub struct Sources {
    list: Vec<Arc<Source>>,
    /// Each source's call timeout, by index.
    timeouts: Vec<Duration>,
    catalog: RwLock<Arc<Catalog>>,
    /// Held from reading the snapshots to swapping the catalog built from
    /// them: two sources rebuilding at once must not let the one that read
    /// first swap in last, dropping what the other just listed.
    rebuilding: Mutex<()>,
    store: Arc<dyn Store>,
}

impl Sources {
    pub(crate) fn new(
        list: Vec<Arc<Source>>,
        timeouts: Vec<Duration>,
        store: Arc<dyn Store>,
    ) -> Sources {
        Sources {
            list,
            timeouts,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            rebuilding: Mutex::new(()),
            store,
        }
    }

    /// Every source, in config order (the index routes carry).
    pub fn all(&self) -> &[Arc<Source>] {
        &self.list
    }

    pub fn get(&self, index: usize) -> &Arc<Source> {
        &self.list[index]
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.list.iter().position(|s| s.name() == name)
    }

    /// How long a call to source `index` may take.
    pub fn call_timeout(&self, index: usize) -> Duration {
        self.timeouts[index]
    }

    /// The catalog as of now; an immutable snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Source `changed` listed new items: build the catalog again from
    /// every source's snapshot, swap it in, and save what `changed` offers.
    pub(crate) fn rebuild_catalog(&self, changed: &str) {
        let _one_at_a_time = self.rebuilding.lock().unwrap_or_else(|p| p.into_inner());
        let offers: Vec<Offer<'_>> = self
            .list
            .iter()
            .map(|s| Offer {
                source: s.name(),
                prefix: s.config.prefix,
                snapshot: s.snapshot(),
            })
            .collect();
        let catalog = Arc::new(Catalog::build(&offers));
        for w in catalog.withheld.iter().filter(|w| w.source == changed) {
            tracing::warn!(source = %w.source, name = %w.name, reason = %w.reason, "not exposing an upstream item");
        }
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = catalog;
        if let Some(source) = self.list.iter().find(|s| s.name() == changed) {
            self.persist_catalog(source);
        }
    }

    fn persist_catalog(&self, source: &Source) {
        fn entries<T: serde::Serialize>(
            items: &[T],
            key: impl Fn(&T) -> String,
        ) -> Vec<(String, serde_json::Value)> {
            items
                .iter()
                .map(|i| (key(i), serde_json::to_value(i).unwrap_or_default()))
                .collect()
        }
        let snap = source.snapshot();
        for (kind, items) in [
            (
                CatalogKind::Tool,
                entries(&snap.tools, |t| t.name.to_string()),
            ),
            (
                CatalogKind::Prompt,
                entries(&snap.prompts, |p| p.name.clone()),
            ),
            (
                CatalogKind::Resource,
                entries(&snap.resources, |r| r.uri.clone()),
            ),
            (
                CatalogKind::ResourceTemplate,
                entries(&snap.resource_templates, |r| r.uri_template.clone()),
            ),
        ] {
            if let Err(e) = self.store.replace_catalog(source.name(), kind, &items) {
                tracing::error!(source = source.name(), error = %e, "cannot save the catalog");
            }
        }
    }
}
