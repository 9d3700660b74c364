"""amrita_plugin_memory: long-term memory for AmritaBot.

L1 memo (always injected), L2 vector memory (tools), L3 offline consolidation
loop. This module is framework glue only: it loads the configuration, builds
the :class:`~.services.MemoryRuntime` and registers hooks, tools and commands.
"""

from nonebot import get_driver, logger, require

require("nonebot_plugin_localstore")
require("nonebot_plugin_orm")
require("nonebot_plugin_apscheduler")
require("nonebot_plugin_amrita")
require("amrita.plugins.chat")

import nonebot_plugin_localstore as localstore  # noqa: E402
from nonebot.plugin import PluginMetadata  # noqa: E402

from .adapters.active_hooks import setup_active_memory  # noqa: E402
from .adapters.archive_hooks import setup_archive  # noqa: E402
from .adapters.console_setup import setup_console  # noqa: E402
from .adapters.episode_hooks import setup_episodes  # noqa: E402
from .adapters.gc_freeze import register_gc_freeze  # noqa: E402
from .adapters.group_hooks import setup_group_awareness  # noqa: E402
from .adapters.matchers import register_commands  # noqa: E402
from .adapters.memo_hook import register_memo_hook, register_memo_key_migration  # noqa: E402
from .adapters.subconscious import bind_user_data, setup_subconscious  # noqa: E402
from .adapters.surface_tools import register_surface_tools  # noqa: E402
from .adapters.turn_context import register_turn_context  # noqa: E402
from .core.config import ConfigError, EnvConfig, PluginConfig  # noqa: E402
from .embedding.startup import run_startup_check  # noqa: E402
from .infra.terminal import cli_subcommand  # noqa: E402
from .services import MemoryRuntime  # noqa: E402
from .storage import models as models  # noqa: E402  (registers the ORM tables)
from .tools.chat_stores import ChatStoreSource  # noqa: E402
from .tools.command_specs import USAGE  # noqa: E402
from .tools.commands import MemoryCommands  # noqa: E402
from .tools.episode_commands import EpisodeCommands  # noqa: E402
from .tools.group_commands import GroupCommands  # noqa: E402
from .tools.user_commands import UserCommands  # noqa: E402

__all__ = ["EnvConfig", "MemoryRuntime", "PluginConfig", "runtime"]

__plugin_meta__ = PluginMetadata(
    name="amrita_plugin_memory",
    description="Amrita 长期记忆插件：L1 备忘录 + L2 向量记忆 + L3 离线巩固循环",
    usage=USAGE,  # the help reply, derived from the declared commands (tools/command_specs)
    type="application",
    config=EnvConfig,
    supported_adapters={"~onebot.v11"},
)


def _setup() -> MemoryRuntime | None:
    """Load the configuration and build the runtime; ``None`` disables the plugin.

    A bad configuration value must not take the bot down: the plugin logs one
    clear message and stays inert while the rest of the bot keeps running.
    Under ``ambot orm …`` (migrations) only the ORM models, registered by the
    import of :mod:`.storage.models` above, are needed: the plugin stays inert
    and starts no vector store (no child ``chroma run``) and no embedding client.
    """
    if cli_subcommand() == "orm":
        logger.info("[Memory] orm 命令只需要数据表模型：插件不启动向量库与嵌入服务")
        return None
    try:
        config = PluginConfig.load(
            config_dir=localstore.get_plugin_config_dir(),
            data_dir=localstore.get_plugin_data_dir(),
            env_overrides=get_driver().config.model_dump(),
            warn=logger.warning,
        )
    except ConfigError as exc:
        logger.error(f"[Memory] 配置无效，插件未启用：{exc}")
        return None
    rt = MemoryRuntime(config)
    # The embedding fingerprint check runs before anything is registered: a
    # refusal (e.g. EMBED_MISMATCH_POLICY=ask without a TTY) leaves the plugin
    # inert while the rest of the bot keeps running.
    check = run_startup_check(rt.maintenance)
    if not check.ok:
        rt.connection.close()  # release the data dir for `ambot memory …`
        return None
    # NoneBot runs shutdown hooks in reverse order of registration: registered
    # first, the store closes last, after the hooks registered below (group
    # windows flushed, active-memory batches finished, L3 runner and archive
    # sweeper stopped, token removed).
    get_driver().on_shutdown(rt.close)
    get_driver().on_startup(rt.pending.start)  # pending memories embedded when the service answers
    register_memo_hook(rt.memo, rt.usage)
    register_turn_context()  # per-turn blocks after the history, never stored
    register_memo_key_migration(rt.memo)  # after nonebot_plugin_orm's init_orm
    register_surface_tools(rt.tools, lambda: rt.scopes, rt.usage)
    awareness = setup_group_awareness(rt)  # group window, personas, self memory
    active = setup_active_memory(rt)  # learns after answered turns, recalls into the prompt
    # Past conversations kept as episodes and recalled by time; an opted-out user's
    # lines are not kept (active memory's consent).
    episodes = setup_episodes(rt, awareness.stores.directory, active.consent.allows)
    runner = setup_subconscious(rt)
    # A user's export and forget (the L3 loop's state, profile and cycles through the
    # loop when it runs; active memory's opt-outs and queued turns through it).
    user_data = rt.user_data(awareness.stores)
    if runner is not None:
        bind_user_data(runner, user_data)
    user_data.consent = active.consent
    user_data.pending_sources.append(active.queue.pending_of)  # exported as queued_turns
    user_data.forget_hooks.append(active.forget)  # unprocessed messages go, work in flight stops
    user_data.forget_hooks.append(episodes.forget)  # their lines waiting in this process go
    users = UserCommands(user_data, rt.config.export_dir)
    chat = ChatStoreSource.of_tools(rt.tools, rt.episodes)  # the commands' one door to stores
    register_commands(
        MemoryCommands(
            rt.tools,
            GroupCommands(awareness.stores, chat, rt.fences),
            users,
            auto=active,
            episodes=EpisodeCommands(chat, rt.calendar, lambda: rt.config.file.episodes.enabled),
            chat=chat,
        ),
        lambda: rt.scopes,
    )
    setup_archive(rt)  # the periodic sweep into the archive ([archive] enabled)
    setup_console(rt, runner, awareness.stores, user_data)  # WebUI page, admin API, ambot memory
    register_gc_freeze()  # short full GC passes: no 200 ms stalls of the event loop
    logger.info(
        f"[Memory] 已加载：向量库 {rt.connection.describe()}，嵌入服务 {rt.embedder.describe()}"
    )
    return rt


runtime = _setup()
