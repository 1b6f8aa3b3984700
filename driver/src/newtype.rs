//! `backend_newtype!`: a backend crate's own backend type over [`crate::DriverBackend`];
//! `driver_type_aliases!`: the crate's names for the driver layer's buffer, stream, event and
//! graph types.

/// Declares a backend type wrapping [`DriverBackend<Driver>`](crate::DriverBackend):
/// `Clone`, `Debug`, [`Backend`](accel_graph_api::Backend) and
/// [`PortableOps`](accel_graph_api::PortableOps) forwarded, `Deref` to the driver backend (for
/// [`DriverBackend::driver`](crate::DriverBackend::driver) and the other generic extras), and
/// `From` both ways. The crate then adds its constructors and extras in an inherent `impl`.
///
/// ```text
/// // In a backend crate whose driver type is `MyDriver`:
/// accel_graph_driver::backend_newtype! {
///     /// My backend.
///     pub struct MyBackend(MyDriver);
/// }
/// impl MyBackend {
///     pub fn new() -> accel_graph_api::Result<Self> {
///         Ok(MyBackend::from(DriverBackend::new(MyDriver::open()?)))
///     }
/// }
/// ```
#[macro_export]
macro_rules! backend_newtype {
    ($(#[$meta:meta])* $vis:vis struct $name:ident($driver:ty);) => {
        $(#[$meta])*
        #[derive(Clone)]
        $vis struct $name($crate::DriverBackend<$driver>);

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl ::std::ops::Deref for $name {
            type Target = $crate::DriverBackend<$driver>;
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        impl ::std::convert::From<$crate::DriverBackend<$driver>> for $name {
            fn from(inner: $crate::DriverBackend<$driver>) -> Self {
                $name(inner)
            }
        }

        impl ::std::convert::From<$name> for $crate::DriverBackend<$driver> {
            fn from(outer: $name) -> Self {
                outer.0
            }
        }

        impl $crate::__api::PortableOps for $name {
            type Memory = $crate::BufferMemory<$driver>;
            type Buffer<T: $crate::__api::Element> = $crate::DriverBuffer<$driver, T>;
            #[inline]
            fn launch(
                &self,
                op: $crate::__api::PortableOp<$crate::__api::View<'_, Self::Buffer<f32>>>,
            ) -> $crate::__api::Result<()> {
                $crate::__api::PortableOps::launch(&self.0, op)
            }
        }

        $crate::__forward_backend!($name, $driver);
    };
}

/// Declares a backend crate's names for the driver layer's types over its driver, each with
/// its doc comment, in this order: the buffer ([`DriverBuffer`](crate::DriverBuffer)), the
/// stream ([`DriverStream`](crate::DriverStream)), the event
/// ([`DriverEvent`](crate::DriverEvent)), the graph implementation
/// ([`DriverGraph`](crate::DriverGraph)) and the graph ([`Graph`](accel_graph_api::Graph) over
/// that implementation) — the associated types of the backend type [`backend_newtype!`]
/// declares. The string names the backend in the doc comments.
///
/// ```text
/// // In a backend crate whose driver type is `MyDevice`:
/// accel_graph_driver::driver_type_aliases! {
///     MyDevice, "my": MyBuffer, MyStream, MyEvent, MyGraphImpl, MyGraph
/// }
/// ```
#[macro_export]
macro_rules! driver_type_aliases {
    (
        $driver:ty, $backend:literal:
        $buffer:ident, $stream:ident, $event:ident, $graph_impl:ident, $graph:ident $(,)?
    ) => {
        #[doc = concat!("A buffer of elements `T` (`f32` unless named) of the ", $backend, " backend.")]
        pub type $buffer<T = f32> = $crate::DriverBuffer<$driver, T>;
        #[doc = concat!("A stream of the ", $backend, " backend.")]
        pub type $stream = $crate::DriverStream<$driver>;
        #[doc = concat!("An event of the ", $backend, " backend.")]
        pub type $event = $crate::DriverEvent<$driver>;
        #[doc = concat!("The graph implementation of the ", $backend, " backend.")]
        pub type $graph_impl = $crate::DriverGraph<$driver>;
        #[doc = concat!("The graph type of the ", $backend, " backend.")]
        pub type $graph = $crate::__api::Graph<$graph_impl>;
    };
}

/// The `Backend` forwarding of [`backend_newtype!`] (every required method; the provided ones
/// keep their defaults).
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_backend {
    ($name:ident, $driver:ty) => {
        impl $crate::__api::Backend for $name {
            type Stream = $crate::DriverStream<$driver>;
            type Event = $crate::DriverEvent<$driver>;
            type Graph = $crate::__api::Graph<$crate::DriverGraph<$driver>>;

            $crate::__forward_backend!(@methods
                fn kind(&self) -> $crate::__api::BackendKind;
                fn instance_id(&self) -> u64;
                fn capabilities(&self) -> $crate::__api::Capabilities;
                fn instance_cache(&self) -> &$crate::__api::InstanceCache;
                fn default_stream(&self) -> Self::Stream;
                fn new_stream(&self) -> $crate::__api::Result<Self::Stream>;
                fn current_stream(&self) -> Self::Stream;
                fn set_current_stream(&self, stream: &Self::Stream) -> $crate::__api::Result<Self::Stream>;
                fn synchronize(&self) -> $crate::__api::Result<()>;
                fn stream_synchronize(&self, stream: &Self::Stream) -> $crate::__api::Result<()>;
                fn is_capturing(&self, stream: &Self::Stream) -> $crate::__api::Result<bool>;
                fn new_event_with(&self, options: $crate::__api::EventOptions) -> $crate::__api::Result<Self::Event>;
                fn record_event(&self, event: &Self::Event) -> $crate::__api::Result<()>;
                fn wait_event(&self, event: &Self::Event) -> $crate::__api::Result<()>;
                fn event_synchronize(&self, event: &Self::Event) -> $crate::__api::Result<()>;
                fn event_query(&self, event: &Self::Event) -> $crate::__api::Result<bool>;
                fn elapsed_time(&self, start: &Self::Event, end: &Self::Event) -> $crate::__api::Result<f32>;
                fn memory_stats(&self) -> $crate::__api::MemoryStats;
                fn memory_snapshot(&self) -> Vec<$crate::__api::BlockInfo>;
                fn empty_cache(&self) -> $crate::__api::Result<()>;
                fn host_callback(&self, f: $crate::__api::HostCallback) -> $crate::__api::Result<()>;
                fn graph(&self, options: $crate::__api::GraphOptions) -> $crate::__api::Result<Self::Graph>;
                fn graph_pool_handle(&self) -> $crate::__api::PoolId;
                fn captured_node(&self) -> $crate::__api::Result<$crate::__api::CapturedNode>;
            );

            #[inline]
            fn update_graph(
                &self,
                graph: &mut Self::Graph,
                from: &Self::Graph,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::update_graph(&self.0, graph, from)
            }

            #[inline]
            fn update_node(
                &self,
                graph: &mut Self::Graph,
                node: $crate::__api::CapturedNode,
                args: &[(usize, $crate::__api::kernel::KernelArg<'_, Self::Memory>)],
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::update_node(&self.0, graph, node, args)
            }

            #[inline]
            fn if_then<'a, T: $crate::__api::ConditionElement>(
                &self,
                cond: impl ::std::convert::Into<$crate::__api::View<'a, Self::Buffer<T>>>,
                then: impl ::std::ops::FnOnce() -> $crate::__api::Result<()>,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::if_then(&self.0, cond, then)
            }

            #[inline]
            fn if_else<'a, T: $crate::__api::ConditionElement>(
                &self,
                cond: impl ::std::convert::Into<$crate::__api::View<'a, Self::Buffer<T>>>,
                then: impl ::std::ops::FnOnce() -> $crate::__api::Result<()>,
                otherwise: impl ::std::ops::FnOnce() -> $crate::__api::Result<()>,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::if_else(&self.0, cond, then, otherwise)
            }

            #[inline]
            fn while_loop<'a, T: $crate::__api::ConditionElement>(
                &self,
                cond: impl ::std::convert::Into<$crate::__api::View<'a, Self::Buffer<T>>>,
                body: impl ::std::ops::FnMut() -> $crate::__api::Result<()>,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::while_loop(&self.0, cond, body)
            }

            #[inline]
            fn alloc<T: $crate::__api::Element>(
                &self,
                len: usize,
            ) -> $crate::__api::Result<Self::Buffer<T>> {
                $crate::__api::Backend::alloc(&self.0, len)
            }

            #[inline]
            fn upload<'a, T: $crate::__api::Element>(
                &self,
                dst: impl ::std::convert::Into<$crate::__api::View<'a, Self::Buffer<T>>>,
                src: &[T],
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::upload(&self.0, dst, src)
            }

            #[inline]
            fn download_into<'a, T: $crate::__api::Element>(
                &self,
                src: impl ::std::convert::Into<$crate::__api::View<'a, Self::Buffer<T>>>,
                dst: &mut [T],
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::download_into(&self.0, src, dst)
            }

            #[inline]
            fn launch_kernel(
                &self,
                kernel: &$crate::__api::kernel::Kernel,
                grid: [u32; 3],
                args: &[$crate::__api::kernel::KernelArg<'_, Self::Memory>],
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::launch_kernel(&self.0, kernel, grid, args)
            }

            #[inline]
            fn prepare_kernel(
                &self,
                kernel: &$crate::__api::kernel::Kernel,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::prepare_kernel(&self.0, kernel)
            }

            #[inline]
            fn gemm<'a, 'b, 'c, T: $crate::__api::FloatElement>(
                &self,
                spec: &$crate::__api::Gemm,
                a: impl ::std::convert::Into<$crate::__api::View<'a, Self::Buffer<T>>>,
                b: impl ::std::convert::Into<$crate::__api::View<'b, Self::Buffer<T>>>,
                c: impl ::std::convert::Into<$crate::__api::View<'c, Self::Buffer<T>>>,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::gemm(&self.0, spec, a, b, c)
            }

            #[inline]
            fn record_stream<T: $crate::__api::Element>(
                &self,
                buffer: &Self::Buffer<T>,
                stream: &Self::Stream,
            ) -> $crate::__api::Result<()> {
                $crate::__api::Backend::record_stream(&self.0, buffer, stream)
            }
        }
    };
    (@methods $(fn $method:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        $(
            #[inline]
            fn $method(&self $(, $arg: $ty)*) -> $ret {
                $crate::__api::Backend::$method(&self.0 $(, $arg)*)
            }
        )*
    };
}
