//! How every CRI RPC answers: one wrapper for the reply and the logged error, one for List/Stream pairs.

use std::future::Future;
use std::pin::Pin;

use tonic::{Response, Status};

use crate::cri::errors::reply;
use crate::proto::runtime::v1 as pb;

/// What an RPC answers.
pub type Reply<T> = Result<Response<T>, Status>;

/// A server stream: a listing in pages, or the event feed.
pub type Pages<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

/// Items per message of a Stream* listing.
const STREAM_PAGE: usize = 256;

/// Answers the RPC `rpc` with what `handler` gives: the reply, or its error mapped to a Status
/// and logged once (the one mapping: [`crate::cri::errors::to_status`]).
pub async fn serve<T>(
    rpc: &'static str,
    handler: impl Future<Output = crate::Result<T>>,
) -> Reply<T> {
    reply(rpc, handler.await)
}

/// The item of a List RPC whose Stream twin sends the same listing in pages (ListContainers and
/// StreamContainers, ListPodSandboxStats and StreamPodSandboxStats, …).
pub trait Listed: Sized + Send + 'static {
    /// The List RPC's reply: every item at once.
    type List;
    /// One message of the Stream RPC.
    type Page: Send + 'static;
    /// The List reply holding `items`.
    fn list(items: Vec<Self>) -> Self::List;
    /// A Stream message holding `items`.
    fn page(items: Vec<Self>) -> Self::Page;
}

/// Answers a List RPC with the whole listing `items` gives.
pub async fn list<I: Listed>(
    rpc: &'static str,
    items: impl Future<Output = crate::Result<Vec<I>>>,
) -> Reply<I::List> {
    serve(rpc, async { items.await.map(I::list) }).await
}

/// Answers a Stream RPC with the listing `items` gives, in pages of [`STREAM_PAGE`] items.
pub async fn stream<I: Listed>(
    rpc: &'static str,
    items: impl Future<Output = crate::Result<Vec<I>>>,
) -> Reply<Pages<I::Page>> {
    serve(rpc, async { items.await.map(pages) }).await
}

/// `items` as a stream of pages; none for no items.
fn pages<I: Listed>(items: Vec<I>) -> Pages<I::Page> {
    let mut items = items.into_iter();
    let pages: Vec<_> = std::iter::from_fn(|| {
        let page: Vec<I> = items.by_ref().take(STREAM_PAGE).collect();
        (!page.is_empty()).then(|| Ok(I::page(page)))
    })
    .collect();
    Box::pin(futures::stream::iter(pages))
}

/// Pairs each listed item with its List reply and Stream message (and their field names).
macro_rules! listed {
    ($($item:ident => $list:ident { $l:ident }, $page:ident { $p:ident };)*) => {$(
        impl Listed for pb::$item {
            type List = pb::$list;
            type Page = pb::$page;
            fn list($l: Vec<Self>) -> pb::$list {
                pb::$list { $l }
            }
            fn page($p: Vec<Self>) -> pb::$page {
                pb::$page { $p }
            }
        }
    )*};
}

listed! {
    PodSandbox => ListPodSandboxResponse { items }, StreamPodSandboxesResponse { pod_sandboxes };
    Container => ListContainersResponse { containers }, StreamContainersResponse { containers };
    ContainerStats => ListContainerStatsResponse { stats },
        StreamContainerStatsResponse { container_stats };
    PodSandboxStats => ListPodSandboxStatsResponse { stats },
        StreamPodSandboxStatsResponse { pod_sandbox_stats };
    PodSandboxMetrics => ListPodSandboxMetricsResponse { pod_metrics },
        StreamPodSandboxMetricsResponse { pod_sandbox_metrics };
    Image => ListImagesResponse { images }, StreamImagesResponse { images };
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn image(id: usize) -> pb::Image {
        pb::Image {
            id: id.to_string(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_listing_streams_in_full_pages_and_a_last_partial_one() {
        let all: Vec<_> = (0..2 * STREAM_PAGE + 1).map(image).collect();
        let r = stream("StreamImages", async { Ok(all.clone()) }).await;
        let pages: Vec<_> = r.expect("pages").into_inner().collect().await;
        let sizes: Vec<_> = pages
            .iter()
            .map(|p| p.as_ref().expect("page").images.len())
            .collect();
        assert_eq!(sizes, [STREAM_PAGE, STREAM_PAGE, 1]);
        let streamed: Vec<_> = pages
            .into_iter()
            .flat_map(|p| p.expect("page").images)
            .collect();
        assert_eq!(streamed, all);
        let listed = list("ListImages", async { Ok(all.clone()) }).await;
        assert_eq!(listed.expect("list").into_inner().images, all);
    }

    #[tokio::test]
    async fn an_empty_listing_streams_no_page_and_an_error_is_a_status() {
        let r = stream::<pb::Container>("StreamContainers", async { Ok(vec![]) }).await;
        assert_eq!(r.expect("pages").into_inner().count().await, 0);
        let r = stream::<pb::Container>("StreamContainers", async {
            Err(crate::Error::invalid("state: unknown enum value 9"))
        })
        .await;
        let s = r.err().expect("an error status");
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(s.message(), "state: unknown enum value 9");
    }
}
