# Jupyter server configuration that a notebook suspended by a GKE Pod Snapshot
# needs. The pod's filesystem, memory and sockets are checkpointed by gVisor and
# restored in a NEW pod (new IP, new hostname, a jump in the wall clock).
#
# Mounted read-only from the ConfigMap `jupyter-suspend-jupyter-config` at
# /etc/jupyter-suspend and put on the config path with JUPYTER_CONFIG_PATH (see
# deploy/base/statefulset.yaml). A user's own ~/.jupyter config still wins.
#
# Why these two settings: GKE's own Workspaces mounts the same two into every
# notebook it suspends, because after a gVisor restore
#   * kernels on the default TCP transport were lost;
#   * the server's asyncio loop, on its default epoll selector, spun at 100% CPU.
# (docs/platform-facts §2; docs/gke.md "Why the Jupyter configuration".)
import asyncio
import selectors

c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by traitlets when loading

# 1. Kernels talk to the server over Unix domain sockets (ZeroMQ `ipc://`)
#    instead of loopback TCP. The socket files live next to the kernel
#    connection files in the Jupyter runtime directory, which the StatefulSet
#    puts on an in-memory emptyDir (JUPYTER_RUNTIME_DIR): it is part of the
#    snapshot, unlike the persistent volume.
c.KernelManager.transport = "ipc"


# 2. The server's event loop waits with poll(2), not epoll(7).
#    `jupyter lab` (the command the StatefulSet runs) creates its loop only after
#    the configuration is loaded (tornado's IOLoop.current() asks asyncio), so the
#    policy takes effect; the loop set here is the one the server then runs.
#    (`jupyter server` creates a loop before reading its configuration; that
#    loop is replaced here too, but jupyter_core keeps a reference to it for
#    its synchronous helpers, so prefer `jupyter lab`.)
class PollSelectorEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """An asyncio policy whose new loops use selectors.PollSelector."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.SelectorEventLoop(selectors.PollSelector())


asyncio.set_event_loop_policy(PollSelectorEventLoopPolicy())
asyncio.set_event_loop(asyncio.new_event_loop())
