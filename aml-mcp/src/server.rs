//! The server-side gate: wraps any rmcp [`ServerHandler`], delegates every method, and
//! gates `tools/call`.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use rmcp::model::*;
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler};

use crate::gate::{ForwardError, McpGate};

/// A [`ServerHandler`] whose `tools/call` passes the boundary before `inner` sees it.
///
/// Answers carry the verdict under `_meta["aml.action-boundary/verdict"]`; refused and
/// blocked calls come back as `isError` results that say why. Every call is recorded in the
/// gate's receipt sink.
pub struct GatedServer<S> {
    inner: Arc<S>,
    gate: McpGate,
}

impl<S> core::fmt::Debug for GatedServer<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GatedServer")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl<S: ServerHandler> GatedServer<S> {
    /// Gates `inner` with `gate`.
    pub fn new(inner: S, gate: McpGate) -> Self {
        GatedServer {
            inner: Arc::new(inner),
            gate,
        }
    }

    /// The wrapped handler.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    async fn gated_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let inner = Arc::clone(&self.inner);
        let verdict = self
            .gate
            .call(request, move |params| {
                let (inner, context) = (Arc::clone(&inner), context.clone());
                async move {
                    match inner.call_tool(params, context).await {
                        Ok(CallToolResponse::Complete(result)) => Ok(result),
                        // The server took the call up without completing it: as uncertain as
                        // a lost response.
                        Ok(_) => Err(ForwardError::NotCompleted("input required or task")),
                        Err(e) => Err(ForwardError::Server {
                            code: e.code.0,
                            message: e.message.to_string(),
                        }),
                    }
                }
            })
            .await;
        Ok(CallToolResponse::Complete(verdict.into_call_result()))
    }
}

macro_rules! delegate_requests {
    ($($name:ident($param:ty) -> $out:ty;)*) => {$(
        fn $name(
            &self,
            request: $param,
            context: RequestContext<RoleServer>,
        ) -> impl Future<Output = Result<$out, McpError>> + MaybeSendFuture + '_ {
            self.inner.$name(request, context)
        }
    )*};
}

macro_rules! delegate_notifications {
    ($($name:ident($param:ty);)*) => {$(
        fn $name(
            &self,
            notification: $param,
            context: NotificationContext<RoleServer>,
        ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
            self.inner.$name(notification, context)
        }
    )*};
}

#[allow(deprecated)] // subscribe/unsubscribe are legacy, but still delegated.
impl<S: ServerHandler> ServerHandler for GatedServer<S> {
    delegate_requests! {
        initialize(InitializeRequestParams) -> InitializeResult;
        complete(CompleteRequestParams) -> CompleteResult;
        set_level(SetLevelRequestParams) -> ();
        get_prompt(GetPromptRequestParams) -> GetPromptResponse;
        list_prompts(Option<PaginatedRequestParams>) -> ListPromptsResult;
        list_resources(Option<PaginatedRequestParams>) -> ListResourcesResult;
        list_resource_templates(Option<PaginatedRequestParams>) -> ListResourceTemplatesResult;
        read_resource(ReadResourceRequestParams) -> ReadResourceResponse;
        subscribe(SubscribeRequestParams) -> ();
        unsubscribe(UnsubscribeRequestParams) -> ();
        list_tools(Option<PaginatedRequestParams>) -> ListToolsResult;
        on_custom_request(CustomRequest) -> CustomResult;
        get_task(GetTaskParams) -> GetTaskResult;
        update_task(UpdateTaskParams) -> ();
        cancel_task(CancelTaskParams) -> ();
        list_skills(Option<PaginatedRequestParams>) -> ListSkillsResult;
        get_skill(GetSkillRequestParams) -> GetSkillResult;
        read_resource_directory(ReadResourceDirectoryRequestParams) -> ReadResourceDirectoryResult;
    }

    delegate_notifications! {
        on_cancelled(CancelledNotificationParam);
        on_progress(ProgressNotificationParam);
        on_custom_notification(CustomNotification);
    }

    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + MaybeSendFuture + '_ {
        self.gated_call(request, context)
    }

    fn ping(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.ping(context)
    }

    fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<DiscoverResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.discover(context)
    }

    fn listen(
        &self,
        context: SubscriptionContext,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.listen(context)
    }

    fn on_initialized(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_initialized(context)
    }

    fn on_roots_list_changed(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_roots_list_changed(context)
    }

    fn negotiate_initialize(&self, request: &InitializeRequestParams) -> Result<InitializeResult, McpError> {
        self.inner.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }
}
