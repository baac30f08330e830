//! The front door: every coordinator answers the public verbs (in their queue groups) and hands
//! each to the shard it is about (docs/adr/0014): a workbench's verbs to `shard_of` its name, a
//! batch's to `shard_of` its id, a job's to the shard its id carries (`…-wKKKKKKKK`, as the CLI
//! and the front doors make them), else to whichever shard holds it (every shard is asked: job
//! ids are the clients'), and lists and stats to every shard, merged (the shards with no owner
//! now are named in the answer's `partial` rather than failing the whole listing). A shard this process holds
//! answers in process; another is asked under its prefix (`atelier.shard.N.`), where only its
//! owner listens. A shard with no owner (a hand-over) is asked again for a while, then the verb
//! is answered `SHARD_UNAVAILABLE`: never from a stale copy.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use atelier_messages::batch::{
    CancelBatch, GetBatch, ListBatches, ListTargets, RetryBatch, SettleBatch, SubmitBatch,
    UpdateBatch,
};
use atelier_messages::feed::ReadEvents;
use atelier_messages::job::{
    ApproveCall, CancelJob, CoordinatorStats, GetJob, GetStats, JobView, ListJobs, MAX_LISTED_JOBS,
    Ping, Pong, ResumeJob,
};
use atelier_messages::review::ReviewDraft;
use atelier_messages::shard::{SweepHost, carried_key, shard_of, shard_of_key};
use atelier_messages::store::{
    AddFiles, BlobBytes, CreateWorkbench, DiffDraft, DiscardDraft, GetBlob, ListFiles,
    ListWorkbenches, PublishDraft, ReadFile, SetApprovals, UploadBlob, WorkbenchInfo, WriteDraft,
};
use atelier_messages::subjects::shard::SWEEP_HOST;
use atelier_messages::subjects::{self, batch, ctl, store, workshop};
use atelier_messages::verb::{Route, Verb};
use atelier_messages::workshop::{
    AddContextItem, CheckMessage, CollectGarbage, CreateCheckpoint, GetHistory, ListCheckpoints,
    ListContextItems, ListModels, Regenerate, RemoveContextItem, RestoreCheckpoint, Rewind,
    SetModel,
};
use atelier_messages::{ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode_reply, encode};
use atelier_transport::{Policy, Router, Routes, request_bytes};
use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;

use crate::collector::HostCollector;
use crate::error::CoordinatorError;
use crate::jobs::newest_first;

mod gc;

/// How long a verb for a shard nobody holds waits for an owner before `SHARD_UNAVAILABLE`.
const OWNER_PATIENCE: Duration = Duration::from_secs(15);

/// A verb forwarded to another coordinator: long calls (a review, a large upload) run while it
/// says it is alive; one that died holding the call is noticed after ten silent seconds.
const FORWARD: Policy = Policy {
    attempts: 1,
    idle_timeout: Duration::from_secs(10),
    max_duration: Duration::from_secs(900),
    backoff: Duration::ZERO,
    progress: true,
};

/// A short verb forwarded to another coordinator (a submission recorded in its shard): one
/// plain request, without the reply subscription of its own and the progress messages a long
/// call needs; a repeat changes nothing, so one lost with its owner is simply sent again.
const FORWARD_SHORT: Policy = Policy {
    attempts: 1,
    idle_timeout: Duration::from_secs(10),
    max_duration: Duration::from_secs(10),
    backoff: Duration::ZERO,
    progress: false,
};

/// The shards of this deployment and what this process holds of them.
#[derive(Clone)]
pub struct FrontDoor {
    inner: Arc<Inner>,
}

struct Inner {
    client: async_nats::Client,
    coordinator_id: String,
    count: u32,
    /// The routes of each shard this process holds.
    held: RwLock<BTreeMap<u32, Routes>>,
    /// The shard of each job found so far (a job never changes shard: its workbench's is fixed).
    job_shards: Mutex<HashMap<String, u32>>,
    /// A replicated deployment's garbage collection on this host (none: the one shard of a
    /// store of this data directory's own collects, in the order of its writes).
    collector: Option<HostCollector>,
}

/// Job shards remembered before the memory starts over.
const REMEMBERED_JOBS: usize = 100_000;

impl FrontDoor {
    pub fn new(
        client: async_nats::Client,
        coordinator_id: String,
        count: u32,
        collector: Option<HostCollector>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                coordinator_id,
                count: count.max(1),
                held: RwLock::default(),
                job_shards: Mutex::default(),
                collector,
            }),
        }
    }

    /// The deployment's shard count.
    pub fn count(&self) -> u32 {
        self.inner.count
    }

    /// The shard of `workbench`.
    pub fn shard_of(&self, workbench: &str) -> u32 {
        shard_of(workbench, self.inner.count)
    }

    /// From now on `shard`'s verbs are answered by `routes`, in process.
    pub fn hold(&self, shard: u32, routes: Routes) {
        if let Ok(mut held) = self.inner.held.write() {
            held.insert(shard, routes);
        }
    }

    /// `shard` is no longer answered here (its engine stops).
    pub fn let_go(&self, shard: u32) {
        if let Ok(mut held) = self.inner.held.write() {
            held.remove(&shard);
        }
    }

    /// The shards this process holds.
    pub fn held(&self) -> Vec<u32> {
        self.inner
            .held
            .read()
            .map(|held| held.keys().copied().collect())
            .unwrap_or_default()
    }

    fn local(&self, shard: u32) -> Option<Routes> {
        self.inner.held.read().ok()?.get(&shard).cloned()
    }

    /// `request` answered by `shard`: here if this process holds it, else by its owner; waits a
    /// while for a shard nobody holds now.
    pub async fn forward<V: Verb>(&self, shard: u32, request: &V) -> Result<V::Reply, ErrorBody> {
        self.forward_within(shard, request, OWNER_PATIENCE, FORWARD)
            .await
    }

    /// [`FrontDoor::forward`], waiting at most `patience` for a shard nobody holds now (none:
    /// one try, then `SHARD_UNAVAILABLE`), asking another coordinator with `policy`.
    async fn forward_within<V: Verb>(
        &self,
        shard: u32,
        request: &V,
        patience: Duration,
        policy: Policy,
    ) -> Result<V::Reply, ErrorBody> {
        let payload: bytes::Bytes = encode(request, Format::MessagePack)?.into();
        let deadline = tokio::time::Instant::now() + patience;
        let reply = loop {
            if let Some(routes) = self.local(shard) {
                let format = Format::MessagePack;
                break routes.answer(V::SUBJECT, payload, format).await.into();
            }
            let subject = subjects::shard::verb(shard, V::SUBJECT);
            match request_bytes(&self.inner.client, &subject, payload.clone(), policy).await {
                Ok(reply) => break reply,
                // Nobody answers the shard's subject: no owner now (the transport's error, not
                // the owner's answer, which is decoded below whatever its code).
                Err(error) if error.code == ErrorCode::ToolWorkerUnavailable => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(unavailable(shard, &error));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error),
            }
        };
        decode_reply(&reply, Format::MessagePack)
    }

    /// `request` answered by the shard of `workbench`.
    pub async fn to_workbench<V: Verb>(
        &self,
        workbench: &str,
        request: &V,
    ) -> Result<V::Reply, ErrorBody> {
        self.forward(self.shard_of(workbench), request).await
    }

    /// `request`, a short verb a repeat of which changes nothing, answered by the shard of
    /// `workbench` if it has an owner now; `SHARD_UNAVAILABLE` at once otherwise (for callers
    /// that can come back later instead of waiting).
    pub async fn to_workbench_now<V: Verb>(
        &self,
        workbench: &str,
        request: &V,
    ) -> Result<V::Reply, ErrorBody> {
        let shard = self.shard_of(workbench);
        self.forward_within(shard, request, Duration::ZERO, FORWARD_SHORT)
            .await
    }

    /// `request` answered by every shard that has an owner (the others waited for a while),
    /// with what is left out: `SHARD_UNAVAILABLE` naming the shards nobody holds. Any other
    /// error fails the whole.
    async fn gather_owned<V: Verb>(
        &self,
        request: &V,
    ) -> Result<(Vec<V::Reply>, Option<ErrorBody>), ErrorBody> {
        let asked = (0..self.inner.count).map(|shard| async move {
            let answer = self.forward(shard, request).await;
            (shard, answer)
        });
        owned_answers(join_all(asked).await)
    }

    /// `request` answered by the shard that knows its id: the first answer that is not
    /// `NOT_FOUND` (as soon as it comes) and the shard it came from, or `NOT_FOUND` when every
    /// shard said so.
    async fn find<V: Verb>(&self, request: &V) -> Result<(u32, V::Reply), ErrorBody> {
        let mut asked: FuturesUnordered<_> = (0..self.inner.count)
            .map(|shard| async move { (shard, self.forward(shard, request).await) })
            .collect();
        let mut not_found = None;
        while let Some((shard, answer)) = asked.next().await {
            match answer {
                Err(error) if error.code == ErrorCode::NotFound => not_found = Some(error),
                answer => return answer.map(|reply| (shard, reply)),
            }
        }
        Err(none_found(not_found))
    }

    /// `request` about job `job_id`, answered by the job's shard: the one its id carries
    /// ([`job_id_for`](atelier_messages::shard::job_id_for)), else the one remembered, else the
    /// one found by asking them all (remembered from then on).
    async fn to_job<V: Verb>(&self, job_id: &str, request: &V) -> Result<V::Reply, ErrorBody> {
        if let Some(key) = carried_key(job_id) {
            return self
                .forward(shard_of_key(key, self.inner.count), request)
                .await;
        }
        let known =
            (self.inner.job_shards.lock().ok()).and_then(|shards| shards.get(job_id).copied());
        if let Some(shard) = known {
            return self.forward(shard, request).await;
        }
        let (shard, reply) = self.find(request).await?;
        if let Ok(mut shards) = self.inner.job_shards.lock() {
            if shards.len() >= REMEMBERED_JOBS {
                shards.clear();
            }
            shards.insert(job_id.to_string(), shard);
        }
        Ok(reply)
    }

    /// Every workbench of the deployment, by name (`SHARD_UNAVAILABLE` while a shard has no
    /// owner: a batch's targets are never chosen from part of them).
    pub async fn list_workbenches(
        &self,
    ) -> Result<Vec<atelier_messages::store::WorkbenchInfo>, ErrorBody> {
        match self.owned_workbenches().await? {
            (all, None) => Ok(all),
            (_, Some(left_out)) => Err(left_out),
        }
    }

    /// The workbenches of the shards that have an owner, by name, and what is left out.
    async fn owned_workbenches(&self) -> Result<Partial<Vec<WorkbenchInfo>>, ErrorBody> {
        let request = ListWorkbenches {
            v: PROTOCOL_VERSION,
        };
        let (lists, left_out) = self.gather_owned(&request).await?;
        let mut all: Vec<_> = lists.into_iter().flatten().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((all, left_out))
    }

    /// Serves the public verbs (in their queue groups) until the returned tasks are aborted.
    pub async fn serve(&self) -> Result<Vec<tokio::task::JoinHandle<()>>, CoordinatorError> {
        let client = &self.inner.client;
        let services = [
            (self.store_routes(), store::WILDCARD, store::QUEUE),
            (self.control_routes(), ctl::WILDCARD, ctl::QUEUE),
            (self.workshop_routes(), workshop::WILDCARD, workshop::QUEUE),
            (self.batch_routes(), batch::WILDCARD, batch::QUEUE),
        ];
        let mut tasks = Vec::new();
        for (routes, wildcard, queue) in services {
            let served = routes
                .serve(client.clone(), wildcard.into(), Some(queue.into()), "")
                .await?;
            tasks.push(served);
        }
        if self.inner.collector.is_some() {
            // Every coordinator sweeps its own host: no queue group.
            let sweeps = Router::new(self.clone())
                .route(|door, _: SweepHost| async move { door.sweep_this_host().await })
                .into_routes()
                .serve(client.clone(), SWEEP_HOST.into(), None, "")
                .await?;
            tasks.push(sweeps);
        }
        Ok(tasks)
    }

    fn store_routes(&self) -> Routes {
        Router::new(self.clone())
            .route(routed::<CreateWorkbench>)
            .route_partial(|door, _: ListWorkbenches| async move { door.owned_workbenches().await })
            .route(routed::<AddFiles>)
            .route(routed::<ListFiles>)
            .route(routed::<ReadFile>)
            .route(routed::<DiffDraft>)
            .route(routed::<PublishDraft>)
            .route(routed::<DiscardDraft>)
            .route(routed::<WriteDraft>)
            .route(routed::<SetApprovals>)
            .route(blob_bytes)
            .route(routed::<UploadBlob>)
            .into_routes()
    }

    fn control_routes(&self) -> Routes {
        Router::new(self.clone())
            .route_partial(|door, r: ListJobs| async move { door.list_jobs(r).await })
            .route(routed::<GetJob>)
            .route(|door, _: Ping| async move { Ok(door.pong()) })
            .route_partial(|door, r: GetStats| async move { door.stats(r).await })
            .route(routed::<CancelJob>)
            .route(routed::<ApproveCall>)
            .route(routed::<ResumeJob>)
            .route(|door, r: ReadEvents| async move {
                crate::event_feed::read(&door.inner.client, r).await
            })
            .into_routes()
    }

    fn workshop_routes(&self) -> Routes {
        Router::new(self.clone())
            .route(routed::<GetHistory>)
            .route(routed::<CheckMessage>)
            .route(routed::<ListModels>)
            .route(routed::<Rewind>)
            .route(routed::<Regenerate>)
            .route(routed::<SetModel>)
            .route(routed::<ListCheckpoints>)
            .route(routed::<CreateCheckpoint>)
            .route(routed::<RestoreCheckpoint>)
            .route(|door, r: CollectGarbage| async move { door.collect_garbage(r).await })
            .route(routed::<ReviewDraft>)
            .route(routed::<AddContextItem>)
            .route(routed::<ListContextItems>)
            .route(routed::<RemoveContextItem>)
            .into_routes()
    }

    fn batch_routes(&self) -> Routes {
        Router::new(self.clone())
            .route(routed::<SubmitBatch>)
            .route(routed::<GetBatch>)
            .route_partial(|door, r: ListBatches| async move { door.list_batches(r).await })
            .route(routed::<ListTargets>)
            .route(routed::<CancelBatch>)
            .route(routed::<RetryBatch>)
            .route(routed::<UpdateBatch>)
            .route(routed::<SettleBatch>)
            .into_routes()
    }

    /// A shard held here, for a verb any shard answers alike (else shard 0, through its owner).
    pub(super) fn any_held_shard(&self) -> u32 {
        self.held().first().copied().unwrap_or(0)
    }

    fn pong(&self) -> Pong {
        Pong {
            coordinator: self.inner.coordinator_id.clone(),
            protocol_version: PROTOCOL_VERSION,
            running_jobs: crate::orchestrator::running_in_process(),
        }
    }

    /// One workbench's jobs from its shard; else every owned shard's, newest first, paged
    /// here, with the shards left out named.
    async fn list_jobs(&self, request: ListJobs) -> Result<Partial<Vec<JobView>>, ErrorBody> {
        if let Some(workbench) = request.workbench.clone() {
            return Ok((self.to_workbench(&workbench, &request).await?, None));
        }
        if self.inner.count == 1 {
            return Ok((self.forward(0, &request).await?, None));
        }
        let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
        let limit = request
            .limit
            .unwrap_or(MAX_LISTED_JOBS)
            .min(MAX_LISTED_JOBS) as usize;
        let wanted = offset.saturating_add(limit);
        let asked = (0..self.inner.count).map(|shard| {
            let request = &request;
            async move { (shard, self.first_jobs(shard, request, wanted).await) }
        });
        let (lists, left_out) = owned_answers(join_all(asked).await)?;
        let mut all: Vec<JobView> = lists.into_iter().flatten().collect();
        newest_first(&mut all, |job| (job.created_at_ms, &job.job_id));
        Ok((all.into_iter().skip(offset).take(limit).collect(), left_out))
    }

    /// `shard`'s first `wanted` jobs of the listing `request` asks for, newest first, page by
    /// page (a shard answers at most [`MAX_LISTED_JOBS`] at once).
    async fn first_jobs(
        &self,
        shard: u32,
        request: &ListJobs,
        wanted: usize,
    ) -> Result<Vec<JobView>, ErrorBody> {
        let mut jobs = Vec::new();
        while jobs.len() < wanted {
            let page = ListJobs {
                offset: jobs.len() as u64,
                limit: Some(MAX_LISTED_JOBS),
                ..request.clone()
            };
            let listed = self.forward(shard, &page).await?;
            let last = listed.len() < MAX_LISTED_JOBS as usize;
            jobs.extend(listed);
            if last {
                break;
            }
        }
        Ok(jobs)
    }

    async fn list_batches(
        &self,
        request: ListBatches,
    ) -> Result<Partial<Vec<atelier_messages::batch::BatchView>>, ErrorBody> {
        let (lists, left_out) = self.gather_owned(&request).await?;
        let mut all: Vec<_> = lists.into_iter().flatten().collect();
        newest_first(&mut all, |batch| (batch.created_at_ms, &batch.batch_id));
        Ok((all, left_out))
    }

    /// Every owned shard's counts added up, under this coordinator's name.
    async fn stats(&self, request: GetStats) -> Result<Partial<CoordinatorStats>, ErrorBody> {
        let mut total = CoordinatorStats {
            coordinator: self.inner.coordinator_id.clone(),
            storage_bytes: 0,
            jobs_by_state: BTreeMap::new(),
            journal_entries: 0,
        };
        let (all, left_out) = self.gather_owned(&request).await?;
        for stats in all {
            total.storage_bytes += stats.storage_bytes;
            total.journal_entries += stats.journal_entries;
            for (state, count) in stats.jobs_by_state {
                *total.jobs_by_state.entry(state).or_default() += count;
            }
        }
        Ok((total, left_out))
    }
}

/// An answer and what it leaves out of what was asked.
type Partial<T> = (T, Option<ErrorBody>);

/// The answers of the shards that have an owner and, when some have none, `SHARD_UNAVAILABLE`
/// naming them; any other error fails the whole.
fn owned_answers<T>(
    answers: Vec<(u32, Result<T, ErrorBody>)>,
) -> Result<Partial<Vec<T>>, ErrorBody> {
    let mut owned = Vec::with_capacity(answers.len());
    let mut unowned = Vec::new();
    for (shard, answer) in answers {
        match answer {
            Ok(answer) => owned.push(answer),
            Err(error) if error.code == ErrorCode::ShardUnavailable => unowned.push(shard),
            Err(error) => return Err(error),
        }
    }
    Ok((owned, left_out(&unowned)))
}

/// `SHARD_UNAVAILABLE` naming the shards a listing left out, if any.
fn left_out(unowned: &[u32]) -> Option<ErrorBody> {
    if unowned.is_empty() {
        return None;
    }
    let shards: Vec<String> = unowned.iter().map(u32::to_string).collect();
    Some(ErrorBody::new(
        ErrorCode::ShardUnavailable,
        format!(
            "shard{} {} had no owner (a coordinator was lost and its leases have not run out): \
             what {} holds is left out of this answer; ask again in a few seconds",
            if shards.len() == 1 { "" } else { "s" },
            shards.join(", "),
            if shards.len() == 1 { "it" } else { "they" },
        ),
    ))
}

/// A verb routed by what it declares ([`Verb::ROUTE`], [`Verb::key`]): a workbench's shard, the
/// shard holding a job, a batch's shard, or any shard held here (else shard 0's owner).
async fn routed<V: Verb>(door: FrontDoor, request: V) -> Result<V::Reply, ErrorBody> {
    let key = request.key().unwrap_or_default();
    match V::ROUTE {
        Route::Workbench => door.to_workbench(key, &request).await,
        Route::Job => door.to_job(key, &request).await,
        Route::Batch => {
            let shard = shard_of(key, door.inner.count);
            door.forward(shard, &request).await
        }
        Route::Anywhere => door.forward(door.any_held_shard(), &request).await,
        other => Err(ErrorBody::new(
            ErrorCode::Internal,
            format!("{} is declared {other:?}, which no key routes", V::SUBJECT),
        )),
    }
}

/// A blob's content: from its workbench's shard when the request names it, else from the shard
/// that has it.
async fn blob_bytes(door: FrontDoor, request: GetBlob) -> Result<BlobBytes, ErrorBody> {
    match &request.workbench {
        Some(workbench) => door.to_workbench(workbench, &request).await,
        None => by_digest(door, request).await,
    }
}

/// A blob's verb: a small blob is kept in its workbench's shard, so the shard that has it
/// answers (a large one any shard can bring from the bucket).
async fn by_digest<V: Verb>(door: FrontDoor, request: V) -> Result<V::Reply, ErrorBody> {
    door.find(&request).await.map(|(_, reply)| reply)
}

/// The `NOT_FOUND` of a search over the shards: the last shard's, if one answered.
fn none_found(not_found: Option<ErrorBody>) -> ErrorBody {
    not_found.unwrap_or_else(|| ErrorBody::new(ErrorCode::NotFound, "no shard answered"))
}

fn unavailable(shard: u32, error: &ErrorBody) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ShardUnavailable,
        format!(
            "shard {shard} has no coordinator answering now ({}); it is being handed over or \
             every coordinator is down: try again in a few seconds, and check `atelier \
             coordinator` processes if it persists",
            error.message
        ),
    )
}
