//! Translation between protocol versions where rmcp does not do it for us.
//!
//! Clients on 2026-07-28 require `resultType` on every result; servers on
//! earlier versions never send it. rmcp strips a `complete` result type for
//! older clients, so airlock marks every result it forwards as complete
//! when the source left it out, and each client receives its own shape.
//!
//! 2026-07-28 clients also expect caching hints (`ttlMs`, `cacheScope`) on
//! lists and reads. What a client may list through airlock changes whenever
//! a person reviews a tool or the policy is reloaded, which no source's
//! hint knows of, so airlock's lists are never fresh and never shared (a
//! listen stream announces each change); a read keeps the source's TTL and
//! is private to this user.

use rmcp::model::{
    CacheScope, CallToolResponse, CompleteResult, GetPromptResponse, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, ReadResourceResponse,
    ResultType,
};

/// A result that carries caching hints.
pub(crate) trait Cacheable {
    fn hints(&mut self) -> (&mut Option<u64>, &mut Option<CacheScope>);
}

macro_rules! cacheable {
    ($($t:ty),*) => {$(
        impl Cacheable for $t {
            fn hints(&mut self) -> (&mut Option<u64>, &mut Option<CacheScope>) {
                (&mut self.ttl_ms, &mut self.cache_scope)
            }
        }
    )*};
}
cacheable!(
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult
);

/// One of airlock's lists, for a client on `modern` 2026-07-28: stale at
/// once, private. Older clients get no hints.
pub(crate) fn listed<T: Cacheable>(mut r: T, modern: bool) -> T {
    if modern {
        let (ttl, scope) = r.hints();
        *ttl = Some(0);
        *scope = Some(CacheScope::Private);
    }
    r
}

pub(crate) fn call(mut r: CallToolResponse) -> CallToolResponse {
    if let CallToolResponse::Complete(c) = &mut r {
        c.result_type.get_or_insert(ResultType::COMPLETE);
    }
    r
}

pub(crate) fn prompt(mut r: GetPromptResponse) -> GetPromptResponse {
    if let GetPromptResponse::Complete(p) = &mut r {
        p.result_type.get_or_insert(ResultType::COMPLETE);
    }
    r
}

/// A read from a source: complete, and for a 2026-07-28 client with the
/// source's TTL (none, or a read that took input: stale at once) and
/// private.
pub(crate) fn resource(
    mut r: ReadResourceResponse,
    modern: bool,
    retried: bool,
) -> ReadResourceResponse {
    if let ReadResourceResponse::Complete(c) = &mut r {
        c.result_type.get_or_insert(ResultType::COMPLETE);
        match modern {
            true => {
                let ttl = c.ttl_ms.get_or_insert(0);
                if retried {
                    *ttl = 0;
                }
                c.cache_scope = Some(CacheScope::Private);
            }
            false => (c.ttl_ms, c.cache_scope) = (None, None),
        }
    }
    r
}

pub(crate) fn completion(mut r: CompleteResult) -> CompleteResult {
    r.result_type.get_or_insert(ResultType::COMPLETE);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ReadResourceResult;

    fn read(ttl: Option<u64>, scope: Option<CacheScope>) -> ReadResourceResponse {
        let mut r = ReadResourceResult::new(vec![]);
        (r.ttl_ms, r.cache_scope) = (ttl, scope);
        ReadResourceResponse::Complete(r)
    }

    fn hints(r: ReadResourceResponse) -> (Option<u64>, Option<CacheScope>) {
        match r {
            ReadResourceResponse::Complete(c) => (c.ttl_ms, c.cache_scope),
            _ => panic!("complete"),
        }
    }

    #[test]
    fn a_reads_ttl_is_kept_and_its_scope_made_private() {
        let public = || read(Some(60_000), Some(CacheScope::Public));
        assert_eq!(
            hints(resource(public(), true, false)),
            (Some(60_000), Some(CacheScope::Private))
        );
        assert_eq!(
            hints(resource(public(), true, true)),
            (Some(0), Some(CacheScope::Private))
        );
        assert_eq!(
            hints(resource(read(None, None), true, false)),
            (Some(0), Some(CacheScope::Private))
        );
        assert_eq!(hints(resource(public(), false, false)), (None, None));
    }

    #[test]
    fn airlocks_lists_are_stale_at_once_and_private() {
        let r = listed(ListToolsResult::with_all_items(vec![]).with_ttl_ms(5), true);
        assert_eq!(
            (r.ttl_ms, r.cache_scope),
            (Some(0), Some(CacheScope::Private))
        );
        let r = listed(ListToolsResult::with_all_items(vec![]), false);
        assert_eq!((r.ttl_ms, r.cache_scope), (None, None));
    }
}
