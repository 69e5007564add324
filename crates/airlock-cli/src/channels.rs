//! Attaches the human channels to a running hub: the desk they record
//! through, the approval page on loopback, and the answers people give in
//! their client's prompt, which the hub hands over.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_channels::desk::Ledger;
use airlock_channels::{ApprovalPage, Desk};
use airlock_config::ApprovalPage as PageMode;
use airlock_gateway::Hub;
use airlock_gateway::channels::HumanChannels;
use airlock_store::Store;
use airlock_store::ledger::{Choice, Recorded};
use airlock_upstream::Secrets;

/// A page that asked for its inbox this recently is being looked at.
const IN_VIEW: Duration = Duration::from_secs(5);
/// At most one new browser tab per this long, however many calls ask.
const REOPEN_AFTER: Duration = Duration::from_secs(30);

struct Attached {
    desk: Arc<Desk>,
    /// Where the private file that forwards the browser to the page goes.
    data_dir: PathBuf,
    page: Option<ApprovalPage>,
    mode: PageMode,
    pointed: Mutex<Option<Instant>>,
}

/// Builds the channels for `hub` (decisions go to `ledger`) and attaches
/// them. `own` is the hub's control socket: a decision made here wakes the
/// call in whichever hub on the data directory it waits in (and, with a
/// team's store, the database tells the other replicas).
pub async fn attach(
    hub: &Arc<Hub>,
    ledger: Ledger,
    data_dir: PathBuf,
    store: Arc<dyn Store>,
    own: Option<PathBuf>,
) -> anyhow::Result<()> {
    let weak = Arc::downgrade(hub);
    let wake_dir = data_dir.clone();
    let desk = Arc::new(Desk::new(
        ledger,
        hub.principal().to_string(),
        Box::new(move |id| {
            if let Some(hub) = weak.upgrade() {
                hub.wake_approval(id);
            }
            airlock_gateway::control::notify(&wake_dir, id, own.as_deref());
        }),
    ));
    let mut mode = hub.settings().approval_page;
    // For machines without a desktop (and test runs): print, never open.
    if mode == PageMode::Open && std::env::var_os("AIRLOCK_NO_BROWSER").is_some() {
        mode = PageMode::Print;
    }
    let page = if mode == PageMode::Off {
        None
    } else {
        let secrets = hub.secrets().clone();
        let page = ApprovalPage::bind(
            ([127, 0, 0, 1], 0).into(),
            store,
            desk.clone(),
            Arc::new(move |text| Secrets::scrub(secrets.as_ref(), text)),
        )
        .await?;
        page.serve(hub.shutdown().child_token());
        tracing::info!(addr = %page.addr(), "approval page listening on loopback");
        Some(page)
    };
    hub.attach_channels(Arc::new(Attached {
        desk,
        data_dir,
        page,
        mode,
        pointed: Mutex::new(None),
    }));
    Ok(())
}

impl HumanChannels for Attached {
    fn waiting(&self, _id: &str, tool: &str) {
        let Some(page) = &self.page else { return };
        if page.in_view(IN_VIEW) {
            return;
        }
        {
            let mut pointed = self.pointed.lock().unwrap_or_else(|p| p.into_inner());
            if pointed.is_some_and(|t| t.elapsed() < REOPEN_AFTER) {
                return;
            }
            *pointed = Some(Instant::now());
        }
        let link = page.link();
        let tool = tool.to_string();
        let open = self.mode == PageMode::Open;
        let data_dir = self.data_dir.clone();
        // Starting a browser can block; the call that asks must not.
        std::thread::spawn(move || {
            if !(open && crate::browser::open(&data_dir, &link).is_ok()) {
                eprintln!("airlock: `{tool}` waits for your approval; decide at {link}");
            }
        });
    }

    fn answered_in_prompt(&self, id: &str, choice: Choice) -> Result<Recorded, String> {
        self.desk
            .decide(id, choice, "prompt")
            .map_err(|e| e.to_string())
    }

    fn page_link(&self) -> Option<String> {
        self.page.as_ref().map(ApprovalPage::link)
    }
}
