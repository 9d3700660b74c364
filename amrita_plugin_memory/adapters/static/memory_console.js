// 记忆管理 —— amrita_plugin_memory's page in the Amrita WebUI.
//
// A plain ES module, loaded by the WebUI with import() (register_page's
// module_url): no build step. React comes from the host
// (window.__AMRITA_HOST__), so the page renders inside the WebUI's layout
// with its theme colours. Every request goes to the plugin's admin API
// (/api/memory/...) with the WebUI session cookie; progress of long
// operations arrives on the WebUI WebSocket channel "amrita_memory"
// (polling /api/memory/jobs/current as a fallback). Tables are paged on the
// server: nothing ever loads a whole partition.

const { React } = window.__AMRITA_HOST__;
const { useState, useEffect, useCallback, useRef } = React;
const h = React.createElement;

const API = "/api/memory";
const CHANNEL = "amrita_memory";
const STYLE_ID = "amrita-memory-console-style";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

async function api(method, path, body) {
  const init = { method, credentials: "include", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(API + path, init);
  } catch (err) {
    throw new Error("无法连接 Bot：" + err.message);
  }
  let payload = null;
  try {
    payload = await resp.json();
  } catch (err) {
    throw new Error(`请求失败（HTTP ${resp.status}）`);
  }
  if (!resp.ok || !payload.success) {
    throw new Error(payload.message || `请求失败（HTTP ${resp.status}）`);
  }
  return payload.data;
}

function qs(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") {
      parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
    }
  }
  return parts.length ? "?" + parts.join("&") : "";
}

// The server sends every stamp in the owner's zone ([memory] timezone) with its offset:
// its date and time are shown as written, never converted to the browser's zone.
function when(iso) {
  if (!iso) return "—";
  const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})/.exec(String(iso));
  return m ? `${m[1]} ${m[2]}` : String(iso);
}

function size(n) {
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB"];
  let v = n;
  let u = "B";
  for (const unit of units) {
    v /= 1024;
    u = unit;
    if (v < 1024) break;
  }
  return `${v.toFixed(1)} ${u}`;
}

const KIND = { user: "用户", group: "群", unknown: "其他" };
const IMPORTANCE = { low: "低", medium: "中", high: "高" };

function injectStyle() {
  if (document.getElementById(STYLE_ID)) return;
  const style = document.createElement("style");
  style.id = STYLE_ID;
  style.textContent = `
.amc{display:flex;flex-direction:column;gap:16px;color:var(--foreground);font-size:14px}
.amc h2{font-size:20px;font-weight:600;margin:0}
.amc h3{font-size:15px;font-weight:600;margin:0 0 8px}
.amc-head{display:flex;align-items:center;justify-content:space-between;gap:12px;flex-wrap:wrap}
.amc-tabs{display:flex;gap:4px;border-bottom:1px solid var(--border);flex-wrap:wrap}
.amc-tab{padding:8px 14px;border:none;background:none;color:var(--muted-foreground);cursor:pointer;border-bottom:2px solid transparent;font-size:14px}
.amc-tab[aria-selected=true]{color:var(--foreground);border-bottom-color:var(--primary);font-weight:600}
.amc-card{background:var(--card);color:var(--card-foreground);border:1px solid var(--border);border-radius:var(--radius,8px);padding:14px}
.amc-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(240px,1fr));gap:12px}
.amc-kv{display:grid;grid-template-columns:max-content 1fr;gap:4px 12px;align-items:baseline}
.amc-kv dt{color:var(--muted-foreground)}
.amc-kv dd{margin:0;word-break:break-all}
.amc-big{font-size:26px;font-weight:600}
.amc-muted{color:var(--muted-foreground)}
.amc-ok{color:#16a34a}.amc-warn{color:#d97706}.amc-bad{color:var(--destructive,#dc2626)}
.amc-btn{display:inline-flex;align-items:center;gap:6px;padding:6px 12px;border-radius:6px;border:1px solid var(--border);background:var(--background);color:var(--foreground);cursor:pointer;font-size:13px;white-space:nowrap}
.amc-btn:hover{background:var(--accent,var(--muted))}
.amc-btn:disabled{opacity:.5;cursor:not-allowed}
.amc-btn.primary{background:var(--primary);color:var(--primary-foreground);border-color:var(--primary)}
.amc-btn.danger{color:var(--destructive,#dc2626);border-color:var(--destructive,#dc2626)}
.amc-btn.danger.solid{background:var(--destructive,#dc2626);color:#fff}
.amc-input,.amc-select,.amc-textarea{padding:6px 8px;border-radius:6px;border:1px solid var(--input,var(--border));background:var(--background);color:var(--foreground);font-size:13px;font-family:inherit}
.amc-textarea{width:100%;min-height:90px;resize:vertical;box-sizing:border-box}
.amc-row{display:flex;gap:8px;align-items:center;flex-wrap:wrap}
.amc-split{display:grid;grid-template-columns:minmax(240px,320px) 1fr;gap:16px;align-items:start}
@media (max-width:900px){.amc-split{grid-template-columns:1fr}}
.amc-table{width:100%;border-collapse:collapse;font-size:13px}
.amc-table th{text-align:left;color:var(--muted-foreground);font-weight:500;padding:6px 8px;border-bottom:1px solid var(--border);white-space:nowrap}
.amc-table td{padding:8px;border-bottom:1px solid var(--border);vertical-align:top}
.amc-table tr.sel td{background:var(--muted)}
.amc-table tr.click{cursor:pointer}
.amc-table tr.click:hover td{background:var(--muted)}
.amc-content{white-space:pre-wrap;word-break:break-word;max-width:560px}
.amc-tag{display:inline-block;padding:1px 6px;margin:0 4px 2px 0;border-radius:10px;background:var(--secondary,var(--muted));color:var(--secondary-foreground,var(--foreground));font-size:12px}
.amc-mono{font-family:var(--font-mono,monospace);font-size:12px}
.amc-msg{padding:8px 12px;border-radius:6px;border:1px solid var(--border)}
.amc-msg.err{border-color:var(--destructive,#dc2626);color:var(--destructive,#dc2626)}
.amc-msg.ok{border-color:#16a34a;color:#16a34a}
.amc-bar{height:10px;border-radius:5px;background:var(--muted);overflow:hidden}
.amc-bar>div{height:100%;background:var(--primary);transition:width .2s}
.amc-modal-back{position:fixed;inset:0;background:rgba(0,0,0,.45);display:flex;align-items:center;justify-content:center;z-index:1000}
.amc-modal .amc-muted{white-space:pre-line;word-break:break-word}
.amc-modal{background:var(--card);color:var(--card-foreground);border:1px solid var(--border);border-radius:10px;padding:18px;max-width:440px;width:90%;display:flex;flex-direction:column;gap:14px}
.amc-list{display:flex;flex-direction:column;gap:2px}
.amc-item{display:flex;justify-content:space-between;gap:8px;padding:7px 9px;border-radius:6px;cursor:pointer;border:1px solid transparent;background:none;color:inherit;text-align:left;font-size:13px}
.amc-item:hover{background:var(--muted)}
.amc-item[aria-current=true]{border-color:var(--primary);background:var(--muted)}
.amc-chart{margin:0;display:flex;flex-direction:column;gap:4px}
.amc-chart svg{display:block;width:100%;height:80px;background:var(--muted);border-radius:4px}
.amc-chart rect{fill:var(--primary)}
.amc-axis{display:flex;justify-content:space-between;font-size:11px;color:var(--muted-foreground)}
`;
  document.head.appendChild(style);
}

// ---------------------------------------------------------------------------
// Small components
// ---------------------------------------------------------------------------

function Button({ kind, ...props }) {
  const cls = "amc-btn" + (kind ? " " + kind : "");
  return h("button", { type: "button", className: cls, ...props });
}

function Message({ message }) {
  if (!message) return null;
  return h(
    "div",
    { className: "amc-msg " + (message.error ? "err" : "ok"), role: message.error ? "alert" : "status" },
    message.text,
  );
}

function Confirm({ request, onClose }) {
  if (!request) return null;
  return h(
    "div",
    { className: "amc-modal-back", onClick: () => onClose(false) },
    h(
      "div",
      { className: "amc-modal", role: "dialog", "aria-modal": "true", onClick: (e) => e.stopPropagation() },
      h("h3", null, request.title),
      h("div", { className: "amc-muted" }, request.text),
      h(
        "div",
        { className: "amc-row", style: { justifyContent: "flex-end" } },
        h(Button, { onClick: () => onClose(false) }, "取消"),
        h(Button, { kind: "danger solid", "data-amc": "confirm", onClick: () => onClose(true) }, request.action),
      ),
    ),
  );
}

function Pager({ offset, limit, total, onChange }) {
  const pages = Math.max(1, Math.ceil(total / limit));
  const page = Math.floor(offset / limit) + 1;
  const go = (p) => onChange(Math.min(Math.max(p, 1), pages));
  return h(
    "div",
    { className: "amc-row amc-muted" },
    h(Button, { disabled: page <= 1, onClick: () => go(1) }, "首页"),
    h(Button, { disabled: page <= 1, onClick: () => go(page - 1), "data-amc": "prev" }, "上一页"),
    h("span", null, `第 ${page} / ${pages} 页，共 ${total} 条`),
    h(Button, { disabled: page >= pages, onClick: () => go(page + 1), "data-amc": "next" }, "下一页"),
    h(Button, { disabled: page >= pages, onClick: () => go(pages) }, "末页"),
  );
}

function useLoader(load, deps) {
  const [state, setState] = useState({ loading: true, data: null, error: null });
  const reload = useCallback(() => {
    let alive = true;
    setState((s) => ({ ...s, loading: true }));
    load()
      .then((data) => alive && setState({ loading: false, data, error: null }))
      .catch((err) => alive && setState({ loading: false, data: null, error: err.message }));
    return () => {
      alive = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  useEffect(reload, [reload]);
  return [state, reload];
}

function Loading({ state, children }) {
  if (state.error) return h(Message, { message: { error: true, text: state.error } });
  if (!state.data) return h("div", { className: "amc-muted" }, "加载中…");
  return children(state.data);
}

// ---------------------------------------------------------------------------
// Overview
// ---------------------------------------------------------------------------

const FEATURES = [
  ["extraction", "主动记忆提取"],
  ["persona", "画像提取"],
  ["subconscious", "L3 循环"],
  ["episodes", "对话片段摘要"],
];
const BLOCKS = [
  ["tools", "工具定义"],
  ["memo", "<MEMO>"],
  ["memories", "<MEMORIES>"],
  ["group_context", "<GROUP_CONTEXT>"],
  ["personas", "<PERSONAS>"],
  ["self", "<SELF>"],
  ["episodes", "<EPISODES>"],
];

// One feature's tokens per day as bars, drawn by the page itself (an inline SVG).
function UsageChart({ feature, label, days, values }) {
  const width = 300;
  const height = 80;
  const top = Math.max(1, ...values);
  const slot = width / days.length;
  const total = values.reduce((a, b) => a + b, 0);
  return h(
    "figure",
    { className: "amc-chart", "data-amc": "usage-chart", "data-feature": feature },
    h("figcaption", null, h("b", null, label), h("div", { className: "amc-muted" },
      `近 30 天 ${total} token，今天 ${values[values.length - 1]}`)),
    h(
      "svg",
      { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
        "aria-label": `${label}每天的 token 数` },
      days.map((day, i) => {
        const barHeight = (values[i] / top) * (height - 4);
        return h(
          "rect",
          { key: day, "data-day": day, "data-tokens": values[i], x: i * slot + 1,
            y: height - barHeight, width: Math.max(1, slot - 2), height: barHeight },
          h("title", null, `${day}：${values[i]} token`),
        );
      }),
    ),
    h("div", { className: "amc-axis" }, h("span", null, days[0]), h("span", null, days[days.length - 1])),
  );
}

function Usage({ usage }) {
  if (!usage) return null;
  const head = h("h3", null, "后台 token 用量（近 30 天）");
  if (usage.error) {
    return h("div", { className: "amc-card", "data-amc": "usage" }, head,
      h("div", { className: "amc-warn" }, usage.error));
  }
  const b = usage.budget;
  const blocks = usage.blocks.last_30_days;
  const cap = (n) => (n ? `${n} token` : "不限");
  const row = (f, span) => {
    const u = usage[span][f];
    const guessed = usage.estimated[span][f];
    return `${u.requests} 次，输入 ${u.prompt_tokens}（缓存命中 ${u.cached_tokens}），输出 ${u.completion_tokens}` +
      (guessed ? `（${guessed} 次为估算）` : "");
  };
  return h(
    "div",
    { className: "amc-card", "data-amc": "usage" },
    head,
    h("div", { className: "amc-grid" },
      FEATURES.map(([f, label]) =>
        h(UsageChart, { key: f, feature: f, label, days: usage.daily.days, values: usage.daily[f] }))),
    h(
      "table",
      { className: "amc-table", style: { marginTop: 12 } },
      h("thead", null, h("tr", null, h("th", null, "功能"), h("th", null, "今天"), h("th", null, "近 30 天"))),
      h("tbody", null, FEATURES.map(([f, label]) =>
        h("tr", { key: f, "data-usage": f }, h("td", null, label), h("td", null, row(f, "today")),
          h("td", null, row(f, "last_30_days"))))),
    ),
    h(
      "dl",
      { className: "amc-kv", style: { marginTop: 12 }, "data-amc": "budget" },
      h("dt", null, "全局每天上限"), h("dd", null, `${cap(b.background_tokens_per_day)}（今天已用 ${b.used_today}）`),
      h("dt", null, "每人每天上限"), h("dd", null, cap(b.background_tokens_per_user_per_day)),
      h("dt", null, "状态"),
      h("dd", { className: b.reached || b.users_reached.length ? "amc-warn" : "amc-ok", "data-amc": "budget-state" },
        b.reached
          ? `今天已达全局上限：后台请求等到 ${when(b.resets_at)} 再继续（聊天不受影响）`
          : b.users_reached.length
            ? `今天已达每人上限：${b.users_reached.map((u) => `${u.user_id}（${u.tokens}）`).join("、")}；` +
              `这些用户的后台请求等到 ${when(b.resets_at)} 再继续`
            : "未达上限"),
      h("dt", null, "每轮注入"),
      h("dd", null, blocks.turns
        ? BLOCKS.filter(([k]) => blocks[k].turns).map(([k, label]) => `${label} ${blocks[k].chars_per_turn} 字`).join("，") +
          `（近 30 天 ${blocks.turns} 轮的平均）`
        : "近 30 天没有对话"),
    ),
  );
}

function Overview({ status }) {
  const fp = status.fingerprint;
  const stateClass = fp.match ? "amc-ok" : fp.current ? "amc-warn" : "amc-muted";
  const l3 = status.subconscious;
  const g = status.group_awareness;
  const keysOk = status.key_format.stored === status.key_format.current;
  return h(
    "div",
    { className: "amc", "data-amc": "overview" },
    h(
      "div",
      { className: "amc-grid" },
      h("div", { className: "amc-card" }, h("div", { className: "amc-muted" }, "记忆总数"),
        h("div", { className: "amc-big", "data-amc": "memory-total" }, status.memory_total),
        status.vector_pending
          ? h("div", { className: "amc-warn", "data-amc": "vector-pending" },
              `待补嵌入 ${status.vector_pending} 条（先按关键词检索）`)
          : null,
        status.keyword_only
          ? h("div", { className: "amc-muted", "data-amc": "keyword-only" }, "无嵌入模式：按关键词检索")
          : null),
      h("div", { className: "amc-card" }, h("div", { className: "amc-muted" }, "分区"),
        h("div", { className: "amc-big" }, new Set(status.distribution.map((d) => d.partition)).size)),
      h("div", { className: "amc-card" }, h("div", { className: "amc-muted" }, `知识库 ${status.knowledge.name}`),
        h("div", { className: "amc-big" }, status.knowledge.count === null ? "—" : status.knowledge.count)),
      h("div", { className: "amc-card" }, h("div", { className: "amc-muted" }, "备份"),
        h("div", { className: "amc-big" }, status.backups.length)),
    ),
    h(Usage, { usage: status.usage }),
    h(
      "div",
      { className: "amc-card" },
      h("h3", null, "嵌入指纹"),
      h(
        "dl",
        { className: "amc-kv" },
        h("dt", null, "向量库"), h("dd", { className: "amc-mono" }, status.vector_db),
        h("dt", null, "已存储"), h("dd", null, fp.stored ? fp.stored.describe : "未记录"),
        h("dt", null, "当前配置"), h("dd", null, fp.current ? fp.current.describe : `无法计算（${fp.current_error}）`),
        h("dt", null, "状态"), h("dd", { className: stateClass }, fp.state),
        h("dt", null, "分区键格式"), h("dd", { className: keysOk ? "amc-ok" : "amc-warn" },
          keysOk ? "一致" : `待迁移（已存储 ${status.key_format.stored || "未记录"}）`),
      ),
      status.pending_temps.length
        ? h("div", { className: "amc-warn" }, `未完成的重映射：${status.pending_temps.join("、")}`)
        : null,
    ),
    h(
      "div",
      { className: "amc-card" },
      h("h3", null, "L3 离线巩固循环"),
      l3.enabled
        ? h(
            "dl",
            { className: "amc-kv" },
            h("dt", null, "目标用户"), h("dd", null, l3.target_user_id),
            h("dt", null, "惩罚值"), h("dd", null, l3.penalty),
            h("dt", null, "下次运行"), h("dd", null, l3.next_run ? when(l3.next_run) : "未计划（等待目标用户发言）"),
            h("dt", null, "正在运行"), h("dd", null, l3.cycle_running ? `第 ${l3.cycle_running} 轮` : "否"),
            h("dt", null, "累计轮数"), h("dd", null, l3.total_runs),
            h("dt", null, "待转达消息"), h("dd", null, l3.pending_notes.length),
            h("dt", null, "知识建议队列"), h("dd", null, l3.suggestions),
            h("dt", null, "知识库"), h("dd", null, l3.knowledge_enabled ? "已启用" : "未启用"),
          )
        : h("div", { className: "amc-muted" }, l3.configured ? "已配置但未启动（target_user_id 为空）" : "未启用"),
      l3.enabled && l3.pending_notes.length
        ? h("ul", null, l3.pending_notes.map((n) => h("li", { key: n.id }, `${when(n.time)}：${n.intent}`)))
        : null,
      l3.enabled && l3.last_abstracts.length
        ? h(
            "div",
            null,
            h("div", { className: "amc-muted", style: { marginTop: 8 } }, "最近几轮摘要"),
            h("ul", null, l3.last_abstracts.map((a) =>
              h("li", { key: a.cycle }, `第 ${a.cycle} 轮（${a.outcome}，${when(a.time)}）：${a.summary}`))),
          )
        : null,
    ),
    h(
      "div",
      { className: "amc-card" },
      h("h3", null, "群聊感知"),
      h(
        "dl",
        { className: "amc-kv" },
        h("dt", null, "群聊上下文窗口"), h("dd", null, g.group_context ? `开启（${g.context_message_count} 条，${g.anonymize ? "匿名" : "实名"}）` : "关闭"),
        h("dt", null, "群成员画像"), h("dd", null, g.persona ? (g.persona_learning ? "开启（学习中）" : "开启（不更新）") : "关闭"),
        h("dt", null, "已有画像"), h("dd", null, g.available ? `${g.personas} 名成员` : "不可用"),
        h("dt", null, "自我记忆"), h("dd", null, g.available ? `${g.self_entries} 条（上限 ${g.self_memory_max_chars} 字）` : "不可用"),
        h("dt", null, "群备忘录可写"), h("dd", null, g.group_memo_editors === "admin" ? "仅管理员" : "所有成员"),
        h("dt", null, "群聊读私聊记忆"), h("dd", null, g.private_memories_in_groups ? "允许" : "不允许"),
        h("dt", null, "群聊读其他群的记忆"), h("dd", null, g.private_memories_in_groups || g.group_memories_across_groups ? "允许" : "不允许"),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------
// Memories
// ---------------------------------------------------------------------------

function PartitionList({ selected, onSelect, refreshKey }) {
  const [offset, setOffset] = useState(0);
  const [typed, setTyped] = useState("");
  const limit = 50;
  const [state] = useLoader(
    () => api("GET", "/partitions" + qs({ offset, limit, fresh: refreshKey ? 1 : undefined })),
    [offset, refreshKey],
  );
  return h(
    "div",
    { className: "amc-card", "data-amc": "partitions" },
    h("h3", null, "分区"),
    h(
      "form",
      { className: "amc-row", style: { marginBottom: 8 }, onSubmit: (e) => { e.preventDefault(); if (typed.trim()) onSelect(typed.trim()); } },
      h("input", { className: "amc-input", style: { flex: 1, minWidth: 0 }, placeholder: "输入分区键直接打开", value: typed, onChange: (e) => setTyped(e.target.value) }),
      h(Button, { type: "submit" }, "打开"),
    ),
    h(Loading, { state }, (data) =>
      h(
        "div",
        null,
        h("div", { className: "amc-muted", style: { marginBottom: 6 } }, `共 ${data.total} 个分区，${data.memories} 条记忆`),
        h(
          "div",
          { className: "amc-list" },
          data.partitions.map((p) =>
            h(
              "button",
              {
                key: p.partition,
                type: "button",
                className: "amc-item",
                "aria-current": p.partition === selected ? "true" : "false",
                "data-partition": p.partition,
                onClick: () => onSelect(p.partition),
              },
              h("span", null, h("span", { className: "amc-tag" }, KIND[p.kind] || p.kind), p.number || p.partition),
              h("span", { className: "amc-muted", title: "最近更新 " + when(p.last_update) }, p.count),
            ),
          ),
        ),
        data.total > limit ? h(Pager, { offset, limit, total: data.total, onChange: (p) => setOffset((p - 1) * limit) }) : null,
      ),
    ),
  );
}

function MemoryRow({ memory, onSaved, onDelete, notify }) {
  const [editing, setEditing] = useState(false);
  const [content, setContent] = useState(memory.content);
  const [tags, setTags] = useState(memory.tags.join("，"));
  const [importance, setImportance] = useState(memory.importance);
  const [busy, setBusy] = useState(false);
  const save = async () => {
    setBusy(true);
    try {
      const tagList = tags.split(/[,，]/).map((t) => t.trim()).filter(Boolean);
      const body = { content, tags: tagList, importance };
      const result = await api("PATCH", `/memories/${encodeURIComponent(memory.id)}` + qs({ partition: memory.partition }), body);
      setEditing(false);
      onSaved(result.memory);
      notify("已保存记忆 " + memory.id);
    } catch (err) {
      notify(err.message, true);
    } finally {
      setBusy(false);
    }
  };
  if (editing) {
    return h(
      "tr",
      { "data-memory": memory.id },
      h(
        "td",
        { colSpan: 5 },
        h("textarea", { className: "amc-textarea", value: content, maxLength: 2000, "data-amc": "edit-content", onChange: (e) => setContent(e.target.value) }),
        h(
          "div",
          { className: "amc-row", style: { marginTop: 6 } },
          h("input", { className: "amc-input", style: { flex: 1 }, value: tags, placeholder: "标签，用逗号分隔", onChange: (e) => setTags(e.target.value) }),
          h(
            "select",
            { className: "amc-select", value: importance, onChange: (e) => setImportance(e.target.value) },
            ["low", "medium", "high"].map((v) => h("option", { key: v, value: v }, "重要性：" + IMPORTANCE[v])),
          ),
          h("span", { className: "amc-muted" }, `${content.length}/2000`),
          h(Button, { kind: "primary", disabled: busy, onClick: save, "data-amc": "save" }, "保存"),
          h(Button, { disabled: busy, onClick: () => setEditing(false) }, "取消"),
        ),
      ),
    );
  }
  return h(
    "tr",
    { "data-memory": memory.id },
    h(
      "td",
      null,
      h("div", { className: "amc-content" }, memory.content),
      h("div", { className: "amc-muted amc-mono", style: { marginTop: 4 } }, memory.id),
    ),
    h("td", null, memory.tags.map((t) => h("span", { key: t, className: "amc-tag" }, t))),
    h("td", null, IMPORTANCE[memory.importance] || memory.importance,
      memory.distance !== undefined ? h("div", { className: "amc-muted" }, "距离 " + memory.distance) : null),
    h("td", { className: "amc-muted" }, when(memory.created_at), h("br"), memory.origin === "private" ? "私聊" : memory.origin.replace("group:", "群 "),
      memory.source === "auto" ? h("div", { className: "amc-tag", title: "主动记忆自动记录" }, "自动记录") : null),
    h(
      "td",
      null,
      h(
        "div",
        { className: "amc-row" },
        h(Button, { onClick: () => setEditing(true), "data-amc": "edit" }, "编辑"),
        h(Button, { kind: "danger", onClick: () => onDelete(memory), "data-amc": "delete" }, "删除"),
      ),
    ),
  );
}

// A user's partition (current or legacy key form) → their QQ number, else null.
function userOf(partition) {
  const m = /(?:^user_|_Private_)(\d+)$/.exec(partition || "");
  return m ? m[1] : null;
}

// Export (a JSON download) and forget of the user whose partition is shown.
function UserDataActions({ userId, notify, ask, onChanged }) {
  const [busy, setBusy] = useState(false);
  const download = async () => {
    setBusy(true);
    try {
      const doc = await api("GET", `/users/${encodeURIComponent(userId)}/export`);
      const blob = new Blob([JSON.stringify(doc, null, 1)], { type: "application/json" });
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = `memory_export_${userId}.json`;
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10000);
      notify(`已导出用户 ${userId} 的数据（记忆 ${doc.memories.length} 条，归档 ${doc.archive.length} 条）`);
    } catch (err) {
      notify(err.message, true);
    } finally {
      setBusy(false);
    }
  };
  const forget = async () => {
    setBusy(true);
    try {
      const preview = await api("GET", `/users/${encodeURIComponent(userId)}/forget`);
      const text = `将永久删除用户 ${userId} 的以下数据（不可撤销；全部 ${preview.counts.backups} 份备份中的也会删除，旧备份恢复时不会带回）：\n`
        + preview.lines.map((l) => "· " + l).join("\n")
        + "\n以下不会删除：\n" + (preview.kept || []).map((l) => "· " + l).join("\n");
      const ok = await ask({ title: "遗忘该用户", text, action: "永久删除" });
      if (!ok) return;
      const done = await api("DELETE", `/users/${encodeURIComponent(userId)}`);
      notify(`已遗忘用户 ${userId}：${done.lines.join("；")}`);
      onChanged();
    } catch (err) {
      notify(err.message, true);
    } finally {
      setBusy(false);
    }
  };
  return h(
    "div",
    { className: "amc-row", style: { marginBottom: 10 }, "data-amc": "user-data" },
    h("span", { className: "amc-muted" }, `用户 ${userId}：`),
    h(Button, { disabled: busy, onClick: download, "data-amc": "user-export" }, "导出全部数据（JSON）"),
    h(Button, { kind: "danger", disabled: busy, onClick: forget, "data-amc": "user-forget" }, "遗忘该用户"),
  );
}

function MemoryTable({ partition, notify, ask, onChanged }) {
  const [offset, setOffset] = useState(0);
  const [limit, setLimit] = useState(20);
  const [typed, setTyped] = useState("");
  const [query, setQuery] = useState("");
  // The owner's dates (inclusive): only the memories of that period (event time, else when said).
  const [typedSince, setTypedSince] = useState("");
  const [typedUntil, setTypedUntil] = useState("");
  const [since, setSince] = useState("");
  const [until, setUntil] = useState("");
  const [version, setVersion] = useState(0);
  useEffect(() => {
    setOffset(0);
    setTyped("");
    setQuery("");
    setTypedSince("");
    setTypedUntil("");
    setSince("");
    setUntil("");
  }, [partition]);
  const [state, reload] = useLoader(
    () => api("GET", "/memories" + qs({ partition, q: query, since, until, offset, limit })),
    [partition, query, since, until, offset, limit, version],
  );
  const remove = async (memory) => {
    const ok = await ask({ title: "删除记忆", text: `确定删除这条记忆吗？它会移入归档（原因“已删除”），可在“归档”页恢复。\n${memory.content.slice(0, 80)}`, action: "删除" });
    if (!ok) return;
    try {
      await api("DELETE", `/memories/${encodeURIComponent(memory.id)}` + qs({ partition: memory.partition }));
      notify("已删除记忆 " + memory.id + "（已移入归档，可恢复）");
      setVersion((v) => v + 1);
      onChanged();
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(
    "div",
    { className: "amc-card", "data-amc": "memories" },
    h("h3", null, "记忆 · ", h("span", { className: "amc-mono" }, partition)),
    userOf(partition) ? h(UserDataActions, { userId: userOf(partition), notify, ask, onChanged: () => { setVersion((v) => v + 1); onChanged(); } }) : null,
    h(
      "form",
      { className: "amc-row", style: { marginBottom: 10 }, onSubmit: (e) => { e.preventDefault(); setOffset(0); setQuery(typed.trim()); setSince(typedSince); setUntil(typedUntil); } },
      h("input", { className: "amc-input", style: { flex: 1, minWidth: 160 }, placeholder: "语义检索（留空显示全部，按时间倒序）", value: typed, maxLength: 500, "data-amc": "search", onChange: (e) => setTyped(e.target.value) }),
      h("input", { className: "amc-input", type: "date", title: "起始日期（含）", value: typedSince, "data-amc": "since", onChange: (e) => setTypedSince(e.target.value) }),
      h("span", { className: "amc-muted" }, "至"),
      h("input", { className: "amc-input", type: "date", title: "结束日期（含）", value: typedUntil, "data-amc": "until", onChange: (e) => setTypedUntil(e.target.value) }),
      h(Button, { type: "submit", kind: "primary", "data-amc": "search-go" }, "检索"),
      query || since || until ? h(Button, { onClick: () => { setTyped(""); setQuery(""); setTypedSince(""); setTypedUntil(""); setSince(""); setUntil(""); setOffset(0); } }, "清除") : null,
      h(
        "select",
        { className: "amc-select", value: limit, onChange: (e) => { setLimit(Number(e.target.value)); setOffset(0); } },
        [20, 50, 100].map((n) => h("option", { key: n, value: n }, `每页 ${n} 条`)),
      ),
      h(Button, { onClick: reload }, "刷新"),
    ),
    h(Loading, { state }, (data) =>
      h(
        "div",
        null,
        data.mode === "search" ? h("div", { className: "amc-muted", style: { marginBottom: 6 } }, `语义检索“${query}”：按相似度排序（最多 100 条）`) : null,
        since || until ? h("div", { className: "amc-muted", style: { marginBottom: 6 }, "data-amc": "period" }, `只看 ${since || "最早"} 至 ${until || "今天"} 的记忆（按主人时区的日期；有事件时间的按事件时间）`) : null,
        data.memories.length === 0
          ? h("div", { className: "amc-muted" }, "没有记忆")
          : h(
              "table",
              { className: "amc-table" },
              h("thead", null, h("tr", null, ["内容", "标签", "重要性", "创建 / 来源", "操作"].map((t) => h("th", { key: t }, t)))),
              h(
                "tbody",
                null,
                data.memories.map((m) =>
                  h(MemoryRow, {
                    key: m.id + m.updated_at,
                    memory: m,
                    notify,
                    onDelete: remove,
                    onSaved: () => setVersion((v) => v + 1),
                  }),
                ),
              ),
            ),
        h("div", { style: { marginTop: 10 } }, h(Pager, { offset, limit, total: data.total, onChange: (p) => setOffset((p - 1) * limit) })),
      ),
    ),
  );
}

function Memories({ notify, ask }) {
  const [partition, setPartition] = useState(null);
  const [refreshKey, setRefreshKey] = useState(0);
  return h(
    "div",
    { className: "amc-split" },
    h(PartitionList, { selected: partition, onSelect: setPartition, refreshKey }),
    partition
      ? h(MemoryTable, { partition, notify, ask, onChanged: () => setRefreshKey((k) => k + 1) })
      : h("div", { className: "amc-card amc-muted" }, "在左侧选择一个分区查看其记忆。"),
  );
}

// ---------------------------------------------------------------------------
// Archive (expired memories and previous versions; nothing is ever deleted)
// ---------------------------------------------------------------------------

const REASON_CLASS = { expired: "amc-muted", updated: "amc-warn", merged: "amc-warn" };

function ArchiveRow({ row, onRestore, onVersions }) {
  return h(
    "tr",
    { "data-archive": row.id },
    h(
      "td",
      null,
      h("div", { className: "amc-content" }, row.content),
      h("div", { className: "amc-muted amc-mono", style: { marginTop: 4 } }, row.id),
    ),
    h("td", { className: "amc-mono" }, row.partition),
    h(
      "td",
      { "data-amc": "reason" },
      h("span", { className: REASON_CLASS[row.reason] || "" }, row.reason_text),
      row.is_version ? h("div", { className: "amc-muted" }, "记忆 ", h("span", { className: "amc-mono" }, row.memory_id)) : null,
    ),
    h("td", { className: "amc-muted" }, when(row.archived_at)),
    h(
      "td",
      null,
      h(Button, { onClick: () => onVersions(row.memory_id), title: "查看该记忆在归档中的全部版本", "data-amc": "versions" }, `${row.versions || 1} 个`),
    ),
    h("td", null, h(Button, { kind: "primary", onClick: () => onRestore(row), "data-amc": "restore" }, "恢复")),
  );
}

function Archive({ notify, ask }) {
  const [offset, setOffset] = useState(0);
  const limit = 20;
  const [typed, setTyped] = useState("");
  const [partition, setPartition] = useState("");
  const [memoryId, setMemoryId] = useState("");
  const [version, setVersion] = useState(0);
  const [busy, setBusy] = useState(false);
  const [state, reload] = useLoader(
    () => api("GET", "/archive" + qs({ partition, memory_id: memoryId, offset, limit })),
    [partition, memoryId, offset, version],
  );
  const restore = async (row) => {
    const text = row.is_version
      ? `用这条旧版本恢复记忆 ${row.memory_id}：该记忆仍存在时替换其当前内容（当前内容会先存入归档，可再恢复）；该记忆本身已归档（超过寿命或删除）时请先恢复它。\n${row.content.slice(0, 80)}`
      : `确定把这条记忆恢复为有效记忆吗？它会回到分区 ${row.partition}（计入该分区的记忆上限）。\n${row.content.slice(0, 80)}`;
    const ok = await ask({ title: "恢复归档记忆", text, action: "恢复" });
    if (!ok) return;
    try {
      const result = await api("POST", `/archive/${encodeURIComponent(row.id)}/restore`, {});
      notify(result.message);
      setVersion((v) => v + 1);
    } catch (err) {
      notify("恢复失败：" + err.message, true);
    }
  };
  const sweep = async () => {
    const ok = await ask({ title: "立即归档清理", text: "把超过寿命的记忆移入归档（不会删除任何记忆，随时可以恢复）。", action: "开始清理" });
    if (!ok) return;
    setBusy(true);
    try {
      const result = await api("POST", "/archive/sweep", {});
      notify(result.message);
      setVersion((v) => v + 1);
    } catch (err) {
      notify("归档清理失败：" + err.message, true);
    } finally {
      setBusy(false);
    }
  };
  const filterBy = (p, m) => {
    setPartition(p);
    setMemoryId(m);
    setOffset(0);
  };
  return h(
    "div",
    { className: "amc-card", "data-amc": "archive" },
    h(
      "div",
      { className: "amc-head" },
      h("h3", null, "归档"),
      h(Button, { disabled: busy, onClick: sweep, "data-amc": "sweep" }, busy ? "清理中…" : "立即归档清理"),
    ),
    h("div", { className: "amc-muted", style: { marginBottom: 8 } }, "超过寿命的、删除的记忆与更新、合并前的旧版本保存在这里，从不删除；恢复后重新参与检索。"),
    h(
      "form",
      { className: "amc-row", style: { marginBottom: 10 }, onSubmit: (e) => { e.preventDefault(); filterBy(typed.trim(), ""); } },
      h("input", { className: "amc-input", style: { flex: 1, minWidth: 160 }, placeholder: "按分区筛选（如 QQPlatform_Private_10001，留空为全部）", value: typed, maxLength: 128, "data-amc": "archive-partition", onChange: (e) => setTyped(e.target.value) }),
      h(Button, { type: "submit", kind: "primary", "data-amc": "archive-filter" }, "筛选"),
      partition || memoryId ? h(Button, { onClick: () => { setTyped(""); filterBy("", ""); }, "data-amc": "archive-clear" }, "显示全部") : null,
      h(Button, { onClick: reload }, "刷新"),
    ),
    memoryId ? h("div", { className: "amc-muted", style: { marginBottom: 6 } }, "记忆 ", h("span", { className: "amc-mono" }, memoryId), " 在归档中的全部版本") : null,
    h(Loading, { state }, (data) =>
      h(
        "div",
        null,
        data.rows.length === 0
          ? h("div", { className: "amc-muted" }, "归档为空")
          : h(
              "table",
              { className: "amc-table" },
              h("thead", null, h("tr", null, ["内容", "分区", "原因", "归档于", "版本", "操作"].map((t) => h("th", { key: t }, t)))),
              h(
                "tbody",
                null,
                data.rows.map((row) =>
                  h(ArchiveRow, { key: row.id, row, onRestore: restore, onVersions: (m) => filterBy(partition, m) }),
                ),
              ),
            ),
        h("div", { style: { marginTop: 10 } }, h(Pager, { offset, limit, total: data.total, onChange: (p) => setOffset((p - 1) * limit) })),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------
// Memos
// ---------------------------------------------------------------------------

function Memos({ notify, ask }) {
  const [offset, setOffset] = useState(0);
  const [version, setVersion] = useState(0);
  const [open, setOpen] = useState(null);
  const [typed, setTyped] = useState("");
  const limit = 20;
  const [state] = useLoader(() => api("GET", "/memos" + qs({ offset, limit })), [offset, version]);
  return h(
    "div",
    { className: "amc-split" },
    h(
      "div",
      { className: "amc-card" },
      h("h3", null, "备忘录（L1）"),
      h(
        "form",
        { className: "amc-row", style: { marginBottom: 8 }, onSubmit: (e) => { e.preventDefault(); if (typed.trim()) setOpen(typed.trim()); } },
        h("input", { className: "amc-input", style: { flex: 1, minWidth: 0 }, placeholder: "会话 ID，如 QQPlatform_Private_10001", value: typed, onChange: (e) => setTyped(e.target.value) }),
        h(Button, { type: "submit" }, "打开"),
      ),
      h(Loading, { state }, (data) =>
        h(
          "div",
          null,
          data.memos.length === 0 ? h("div", { className: "amc-muted" }, "还没有备忘录") : null,
          h(
            "div",
            { className: "amc-list" },
            data.memos.map((m) =>
              h(
                "button",
                { key: m.uni_id, type: "button", className: "amc-item", "aria-current": m.uni_id === open ? "true" : "false", onClick: () => setOpen(m.uni_id) },
                h("span", { className: "amc-mono" }, m.uni_id),
                h("span", { className: "amc-muted" }, `${m.chars} 字`),
              ),
            ),
          ),
          data.total > limit ? h(Pager, { offset, limit, total: data.total, onChange: (p) => setOffset((p - 1) * limit) }) : null,
        ),
      ),
    ),
    open
      ? h(MemoEditor, { key: open, uniId: open, notify, ask, onChanged: () => setVersion((v) => v + 1) })
      : h("div", { className: "amc-card amc-muted" }, "选择或输入一个会话 ID 编辑它的备忘录。"),
  );
}

function MemoEditor({ uniId, notify, ask, onChanged }) {
  const [state, reload] = useLoader(() => api("GET", `/memos/${encodeURIComponent(uniId)}`), [uniId]);
  const [text, setText] = useState(null);
  const value = text !== null ? text : state.data ? state.data.content : "";
  const save = async () => {
    try {
      await api("PUT", `/memos/${encodeURIComponent(uniId)}`, { content: value });
      notify("已保存备忘录");
      setText(null);
      reload();
      onChanged();
    } catch (err) {
      notify(err.message, true);
    }
  };
  const clear = async () => {
    if (!(await ask({ title: "清空备忘录", text: `确定清空 ${uniId} 的备忘录吗？`, action: "清空" }))) return;
    try {
      await api("DELETE", `/memos/${encodeURIComponent(uniId)}`);
      notify("已清空备忘录");
      setText(null);
      reload();
      onChanged();
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(
    "div",
    { className: "amc-card" },
    h("h3", null, "备忘录 · ", h("span", { className: "amc-mono" }, uniId)),
    h(Loading, { state }, (data) =>
      h(
        "div",
        null,
        h("textarea", { className: "amc-textarea", style: { minHeight: 200 }, value, onChange: (e) => setText(e.target.value) }),
        h(
          "div",
          { className: "amc-row", style: { marginTop: 8 } },
          h("span", { className: value.trim().length > data.max_chars ? "amc-bad" : "amc-muted" }, `${value.trim().length}/${data.max_chars} 字`),
          h(Button, { kind: "primary", onClick: save }, "保存"),
          data.exists ? h(Button, { kind: "danger", onClick: clear }, "清空") : null,
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------
// Knowledge base and profile
// ---------------------------------------------------------------------------

function Knowledge({ notify, ask }) {
  const [offset, setOffset] = useState(0);
  const [version, setVersion] = useState(0);
  const [open, setOpen] = useState(null);
  const limit = 20;
  const [state] = useLoader(() => api("GET", "/knowledge" + qs({ offset, limit })), [offset, version]);
  if (state.error) return h(Message, { message: { error: true, text: state.error } });
  const changed = (kid) => {
    setOpen(kid);
    setVersion((v) => v + 1);
  };
  return h(
    "div",
    { className: "amc-split" },
    h(
      "div",
      { className: "amc-card" },
      h("div", { className: "amc-head" }, h("h3", null, "全局知识库"), h(Button, { onClick: () => setOpen("new") }, "新建知识")),
      h(Loading, { state }, (data) =>
        h(
          "div",
          null,
          data.entries.length === 0 ? h("div", { className: "amc-muted" }, "知识库为空") : null,
          h(
            "div",
            { className: "amc-list" },
            data.entries.map((e) =>
              h(
                "button",
                { key: e.kid, type: "button", className: "amc-item", "aria-current": e.kid === open ? "true" : "false", onClick: () => setOpen(e.kid) },
                h("span", null, e.title),
                h("span", { className: "amc-muted" }, when(e.updated_at)),
              ),
            ),
          ),
          data.total > limit ? h(Pager, { offset, limit, total: data.total, onChange: (p) => setOffset((p - 1) * limit) }) : null,
        ),
      ),
    ),
    open ? h(KnowledgeEditor, { key: open, kid: open, notify, ask, onChanged: changed }) : h("div", { className: "amc-card amc-muted" }, "选择一条知识查看或编辑。"),
  );
}

function KnowledgeEditor({ kid, notify, ask, onChanged }) {
  const isNew = kid === "new";
  const [state] = useLoader(() => (isNew ? Promise.resolve({ title: "", summary: "", body: "" }) : api("GET", `/knowledge/${encodeURIComponent(kid)}`)), [kid]);
  const [draft, setDraft] = useState(null);
  const entry = draft || state.data;
  const set = (field) => (e) => setDraft({ ...entry, [field]: e.target.value });
  const save = async () => {
    try {
      const body = { title: entry.title, summary: entry.summary, body: entry.body };
      const saved = isNew ? await api("POST", "/knowledge", body) : await api("PATCH", `/knowledge/${encodeURIComponent(kid)}`, body);
      notify("已保存知识 " + saved.kid);
      setDraft(null);
      onChanged(saved.kid);
    } catch (err) {
      notify(err.message, true);
    }
  };
  const remove = async () => {
    if (!(await ask({ title: "删除知识", text: `确定删除“${entry.title}”吗？`, action: "删除" }))) return;
    try {
      await api("DELETE", `/knowledge/${encodeURIComponent(kid)}`);
      notify("已删除知识 " + kid);
      onChanged(null);
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(
    "div",
    { className: "amc-card" },
    h("h3", null, isNew ? "新建知识" : "知识 · " + kid),
    h(Loading, { state }, () =>
      h(
        "div",
        { className: "amc", style: { gap: 8 } },
        h("input", { className: "amc-input", placeholder: "标题", value: entry.title, onChange: set("title") }),
        h("input", { className: "amc-input", placeholder: "摘要", value: entry.summary, onChange: set("summary") }),
        h("textarea", { className: "amc-textarea", style: { minHeight: 220 }, placeholder: "正文（Markdown）", value: entry.body, onChange: set("body") }),
        h("div", { className: "amc-row" }, h(Button, { kind: "primary", onClick: save }, "保存"), isNew ? null : h(Button, { kind: "danger", onClick: remove }, "删除")),
      ),
    ),
  );
}

function Profile({ notify }) {
  const [state, reload] = useLoader(() => api("GET", "/profile"), []);
  const [draft, setDraft] = useState({});
  const save = async (section) => {
    try {
      await api("PUT", `/profile/${section}`, { content: draft[section] });
      notify("已保存用户画像");
      setDraft((d) => ({ ...d, [section]: undefined }));
      reload();
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(Loading, { state }, (data) =>
    h(
      "div",
      { className: "amc" },
      h("div", { className: "amc-muted" }, data.target_user_id ? `L3 目标用户 ${data.target_user_id} 的画像（user_profile.md），由巩固循环逐行维护。` : "L3 未启用：画像文件 user_profile.md 仍可在此查看与编辑。"),
      ["summary", "body"].map((section) =>
        h(
          "div",
          { className: "amc-card", key: section },
          h("h3", null, section === "summary" ? `摘要（${data.summary_lines} 行）` : `正文（${data.body_lines} 行）`),
          h("textarea", {
            className: "amc-textarea",
            style: { minHeight: section === "summary" ? 90 : 240 },
            value: draft[section] !== undefined ? draft[section] : data[section],
            onChange: (e) => setDraft((d) => ({ ...d, [section]: e.target.value })),
          }),
          h("div", { className: "amc-row", style: { marginTop: 8 } }, h(Button, { kind: "primary", disabled: draft[section] === undefined, onClick: () => save(section) }, "保存")),
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------
// Group awareness: member personas and the bot's self memory
// ---------------------------------------------------------------------------

function Personas({ notify, ask }) {
  const [offset, setOffset] = useState(0);
  const [version, setVersion] = useState(0);
  const [form, setForm] = useState({ user_id: "", field: "", value: "" });
  const limit = 20;
  const [state] = useLoader(() => api("GET", "/personas" + qs({ offset, limit })), [offset, version]);
  const set = (name) => (e) => setForm({ ...form, [name]: e.target.value });
  const save = async (e) => {
    e.preventDefault();
    try {
      await api("PATCH", `/personas/${encodeURIComponent(form.user_id.trim())}`, { field: form.field, value: form.value });
      notify(`已更新成员 ${form.user_id.trim()} 的画像`);
      setForm({ ...form, field: "", value: "" });
      setVersion((v) => v + 1);
    } catch (err) {
      notify(err.message, true);
    }
  };
  const clear = async (uid) => {
    if (!(await ask({ title: "清空画像", text: `确定清空成员 ${uid} 的画像吗？`, action: "清空" }))) return;
    try {
      await api("DELETE", `/personas/${encodeURIComponent(uid)}`);
      notify(`已清空成员 ${uid} 的画像`);
      setVersion((v) => v + 1);
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(
    "div",
    { className: "amc-card" },
    h("h3", null, "群成员画像"),
    h(
      "form",
      { className: "amc-row", style: { marginBottom: 10 }, onSubmit: save },
      h("input", { className: "amc-input", style: { width: 130 }, placeholder: "QQ 号", value: form.user_id, onChange: set("user_id") }),
      h("input", { className: "amc-input", style: { width: 110 }, placeholder: "字段", maxLength: 16, value: form.field, onChange: set("field") }),
      h("input", { className: "amc-input", style: { flex: 1, minWidth: 160 }, placeholder: "值", maxLength: 200, value: form.value, onChange: set("value") }),
      h(Button, { type: "submit", kind: "primary" }, "添加 / 修改字段"),
    ),
    h(Loading, { state }, (data) =>
      h(
        "div",
        null,
        data.personas.length === 0
          ? h("div", { className: "amc-muted" }, "还没有画像")
          : h(
              "table",
              { className: "amc-table" },
              h("thead", null, h("tr", null, ["成员", "画像", "更新时间", ""].map((t, i) => h("th", { key: i }, t)))),
              h(
                "tbody",
                null,
                data.personas.map((p) =>
                  h(
                    "tr",
                    { key: p.user_id },
                    h("td", { className: "amc-mono" }, p.user_id, p.learning_off ? h("div", { className: "amc-warn" }, "已关闭学习") : null),
                    h("td", null, p.fields.map((f) => h("div", { key: f.field }, h("span", { className: "amc-tag" }, f.field), f.value))),
                    h("td", { className: "amc-muted" }, when(p.updated_at)),
                    h("td", null, p.fields.length ? h(Button, { kind: "danger", onClick: () => clear(p.user_id) }, "清空") : null),
                  ),
                ),
              ),
            ),
        data.total > limit ? h(Pager, { offset, limit, total: data.total, onChange: (pg) => setOffset((pg - 1) * limit) }) : null,
      ),
    ),
  );
}

function SelfMemory({ notify, ask }) {
  const [version, setVersion] = useState(0);
  const [text, setText] = useState("");
  const [state] = useLoader(() => api("GET", "/self"), [version]);
  const add = async () => {
    try {
      await api("POST", "/self", { content: text });
      notify("已新增自我记忆");
      setText("");
      setVersion((v) => v + 1);
    } catch (err) {
      notify(err.message, true);
    }
  };
  const remove = async (entry) => {
    if (!(await ask({ title: "删除自我记忆", text: `确定删除第 ${entry.number} 条吗？\n${entry.content.slice(0, 80)}`, action: "删除" }))) return;
    try {
      await api("DELETE", `/self/${entry.id}`);
      notify(`已删除第 ${entry.number} 条自我记忆`);
      setVersion((v) => v + 1);
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(
    "div",
    { className: "amc-card" },
    h("h3", null, "机器人自我记忆"),
    h(Loading, { state }, (data) =>
      h(
        "div",
        { className: "amc", style: { gap: 8 } },
        h("div", { className: "amc-muted" }, `共 ${data.entries.length} 条，${data.chars}/${data.max_chars} 字（每轮对话都会注入）`),
        data.entries.map((e) =>
          h("div", { key: e.id, className: "amc-row", style: { justifyContent: "space-between" } },
            h("span", { className: "amc-content" }, `${e.number}. ${e.content}`),
            h(Button, { kind: "danger", onClick: () => remove(e) }, "删除")),
        ),
        h("textarea", { className: "amc-textarea", placeholder: "新的一条自我记忆", value: text, onChange: (e) => setText(e.target.value) }),
        h("div", { className: "amc-row" }, h(Button, { kind: "primary", disabled: !text.trim(), onClick: add }, "新增")),
      ),
    ),
  );
}

function Groups({ notify, ask }) {
  return h("div", { className: "amc" }, h(Personas, { notify, ask }), h(SelfMemory, { notify, ask }));
}

// ---------------------------------------------------------------------------
// Backups and maintenance
// ---------------------------------------------------------------------------

function Progress({ job }) {
  if (!job) return h("div", { className: "amc-muted" }, "当前没有维护任务。");
  const pct = job.total ? Math.round((job.done / job.total) * 100) : job.state === "done" ? 100 : 0;
  const cls = job.state === "failed" ? "amc-bad" : job.state === "done" ? "amc-ok" : "";
  return h(
    "div",
    { "data-amc": "job", "data-state": job.state },
    h("div", { className: "amc-row", style: { justifyContent: "space-between" } },
      h("span", null, `${job.label}（${job.actor}，${when(job.started_at)}）`),
      h("span", { className: cls }, job.state === "running" ? `${job.done}/${job.total || "?"}（${pct}%）` : job.message)),
    h("div", { className: "amc-bar", style: { marginTop: 6 } }, h("div", { style: { width: pct + "%" } })),
  );
}

function Maintenance({ notify, ask, job, onStarted }) {
  const [version, setVersion] = useState(0);
  const [state] = useLoader(() => api("GET", "/backups"), [version, job && job.state]);
  const running = job && job.state === "running";
  const backup = async () => {
    try {
      const made = await api("POST", "/backups", {});
      notify(`已创建备份 ${made.name}（${made.total} 条）`);
      setVersion((v) => v + 1);
    } catch (err) {
      notify(err.message, true);
    }
  };
  const start = async (path, confirmation) => {
    if (!(await ask(confirmation))) return;
    try {
      onStarted(await api("POST", path, {}));
    } catch (err) {
      notify(err.message, true);
    }
  };
  return h(
    "div",
    { className: "amc" },
    h(
      "div",
      { className: "amc-card" },
      h("h3", null, "重映射"),
      h("div", { className: "amc-muted", style: { marginBottom: 8 } }, "用当前嵌入模型重新嵌入全部记忆与知识库（先自动备份）。期间写入记忆会被拒绝，检索照常。"),
      h("div", { className: "amc-row", style: { marginBottom: 10 } },
        h(Button, { kind: "primary", disabled: running, "data-amc": "reindex",
          onClick: () => start("/reindex", { title: "重映射", text: "确定用当前嵌入模型重新嵌入全部记忆吗？开始前会自动备份。", action: "开始重映射" }) }, "开始重映射")),
      h(Progress, { job }),
    ),
    h(
      "div",
      { className: "amc-card" },
      h("div", { className: "amc-head" }, h("h3", null, "备份"), h(Button, { disabled: running, onClick: backup, "data-amc": "backup" }, "立即备份")),
      h(Loading, { state }, (data) =>
        h(
          "div",
          null,
          h("div", { className: "amc-muted", style: { marginBottom: 6 } }, `目录 ${data.backup_dir}，保留最近 ${data.keep} 份`),
          data.backups.length === 0
            ? h("div", { className: "amc-muted" }, "还没有备份")
            : h(
                "table",
                { className: "amc-table" },
                h("thead", null, h("tr", null, ["文件", "创建时间", "内容", "大小", ""].map((t, i) => h("th", { key: i }, t)))),
                h(
                  "tbody",
                  null,
                  data.backups.map((b) =>
                    h(
                      "tr",
                      { key: b.name },
                      h("td", { className: "amc-mono" }, b.name),
                      h("td", null, when(b.created_at)),
                      h("td", null, Object.entries(b.counts).map(([k, n]) => `${k} ${n} 条`).join("，") || "—"),
                      h("td", null, size(b.size)),
                      h("td", null, h(Button, { kind: "danger", disabled: running,
                        onClick: () => start(`/backups/${encodeURIComponent(b.name)}/restore`, { title: "恢复备份", text: `确定用 ${b.name} 替换当前全部记忆吗？当前内容会先备份。`, action: "恢复" }) }, "恢复")),
                    ),
                  ),
                ),
              ),
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------

function useJob() {
  const [job, setJob] = useState(null);
  const wsRef = useRef(null);
  useEffect(() => {
    api("GET", "/jobs/current").then((d) => setJob(d.job)).catch(() => {});
    let ws;
    try {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      ws = new WebSocket(scheme + location.host + "/amrita/ui/ws");
      ws.onopen = () => ws.send(JSON.stringify({ action: "subscribe", channels: [CHANNEL] }));
      ws.onmessage = (event) => {
        const msg = JSON.parse(event.data);
        if (msg.channel === CHANNEL && msg.data && msg.data.job) setJob(msg.data.job);
      };
      wsRef.current = ws;
    } catch (err) {
      wsRef.current = null;
    }
    return () => ws && ws.close();
  }, []);
  // Fallback: poll while a job runs (a proxy may block the WebSocket).
  useEffect(() => {
    if (!job || job.state !== "running") return undefined;
    const timer = setInterval(() => {
      api("GET", "/jobs/current").then((d) => d.job && setJob(d.job)).catch(() => {});
    }, 1000);
    return () => clearInterval(timer);
  }, [job && job.id, job && job.state]);
  return [job, setJob];
}

// ---------------------------------------------------------------------------
// Timeline: one chat's days (episodes and the memories written that day)
// ---------------------------------------------------------------------------

const EPISODE_SOURCE = { model: "模型摘要", extract: "抽取" };

function hourOf(iso) {
  const m = /[T ](\d{2}:\d{2})/.exec(String(iso || ""));
  return m ? m[1] : "—";
}

function EpisodeItem({ episode }) {
  return h(
    "div",
    { "data-episode": episode.id, className: episode.archived ? "amc-muted" : null, style: { margin: "4px 0" } },
    h("span", { className: "amc-mono" }, `${hourOf(episode.start_at)}–${hourOf(episode.end_at)} `),
    episode.summary || "（无摘要）",
    " ",
    episode.topics.map((t) => h("span", { key: t, className: "amc-tag" }, t)),
    h("span", { className: "amc-muted" }, ` ${episode.messages} 条消息 · ${EPISODE_SOURCE[episode.source] || episode.source}`),
    episode.archived ? h("span", { className: "amc-warn" }, " 已归档") : null,
  );
}

function Timeline() {
  const [form, setForm] = useState({ kind: "user", id: "", days: "30" });
  const [asked, setAsked] = useState(null);
  const [state] = useLoader(
    () => (asked ? api("GET", "/timeline" + qs({ [asked.kind]: asked.id, days: asked.days })) : Promise.resolve({ timeline: null })),
    [asked && asked.kind, asked && asked.id, asked && asked.days],
  );
  const set = (name) => (e) => setForm({ ...form, [name]: e.target.value });
  const show = (e) => {
    e.preventDefault();
    setAsked({ kind: form.kind, id: form.id.trim(), days: form.days.trim() });
  };
  return h(
    "div",
    { className: "amc-card", "data-amc": "timeline" },
    h("h3", null, "时间线"),
    h(
      "form",
      { className: "amc-row", style: { marginBottom: 10 }, onSubmit: show },
      h("select", { className: "amc-input", value: form.kind, onChange: set("kind"), "data-amc": "timeline-kind" },
        h("option", { value: "user" }, "用户私聊"), h("option", { value: "group" }, "群")),
      h("input", { className: "amc-input", style: { width: 140 }, placeholder: form.kind === "user" ? "QQ 号" : "群号", value: form.id, onChange: set("id"), "data-amc": "timeline-id" }),
      h("input", { className: "amc-input", style: { width: 70 }, type: "number", min: 1, max: 366, value: form.days, onChange: set("days"), "data-amc": "timeline-days" }),
      h("span", { className: "amc-muted" }, "天"),
      h(Button, { type: "submit", kind: "primary", "data-amc": "timeline-go" }, "查看"),
    ),
    h(Loading, { state }, (data) => {
      if (!data.timeline) return h("div", { className: "amc-muted" }, "输入 QQ 号或群号查看按天排列的对话片段与当天写下的记忆");
      if (data.timeline.length === 0) return h("div", { className: "amc-muted" }, `最近 ${data.days} 天没有对话片段，也没有写下记忆`);
      return h(
        "div",
        null,
        h("div", { className: "amc-muted" }, `${data.partition}，自 ${data.first_day} 起（${data.timezone}）`),
        data.memories_cut ? h("div", { className: "amc-warn" }, "记忆过多，只显示了最新的一部分") : null,
        data.timeline.map((day) =>
          h(
            "div",
            { key: day.day, "data-day": day.day, style: { marginTop: 12 } },
            h("h4", { style: { margin: "6px 0" } }, `${day.day} ${day.weekday}`),
            day.episodes.length
              ? h("div", null, h("div", { className: "amc-muted" }, `对话片段 ${day.episodes.length} 段`), day.episodes.map((e) => h(EpisodeItem, { key: e.id, episode: e })))
              : null,
            day.memories.length
              ? h(
                  "div",
                  null,
                  h("div", { className: "amc-muted" }, `当天写下的记忆 ${day.memories.length} 条`),
                  day.memories.map((m) =>
                    h("div", { key: m.id, "data-memory": m.id, style: { margin: "4px 0" } },
                      h("span", { className: "amc-mono" }, `${hourOf(m.created_at)} `), m.content,
                      h("span", { className: "amc-muted" }, ` ${IMPORTANCE[m.importance] || m.importance || ""}`)),
                  ),
                )
              : null,
          ),
        ),
      );
    }),
  );
}

const TABS = [
  ["overview", "概览"],
  ["memories", "记忆"],
  ["archive", "归档"],
  ["timeline", "时间线"],
  ["memos", "备忘录"],
  ["knowledge", "知识库"],
  ["profile", "用户画像"],
  ["groups", "群聊感知"],
  ["maintenance", "备份与维护"],
];

export default function MemoryConsole() {
  injectStyle();
  const [tab, setTab] = useState("overview");
  const [message, setMessage] = useState(null);
  const [confirm, setConfirm] = useState(null);
  const [statusKey, setStatusKey] = useState(0);
  const [job, setJob] = useJob();
  const [status] = useLoader(() => api("GET", "/status" + qs({ fresh: statusKey ? 1 : undefined })), [statusKey, job && job.state]);
  const notify = useCallback((text, error = false) => setMessage({ text, error }), []);
  const ask = useCallback((request) => new Promise((resolve) => setConfirm({ ...request, resolve })), []);
  const closeConfirm = (ok) => {
    const resolve = confirm && confirm.resolve;
    setConfirm(null);
    if (resolve) resolve(ok);
  };
  let body;
  if (tab === "overview") body = h(Loading, { state: status }, (data) => h(Overview, { status: data }));
  else if (tab === "memories") body = h(Memories, { notify, ask });
  else if (tab === "archive") body = h(Archive, { notify, ask });
  else if (tab === "timeline") body = h(Timeline, null);
  else if (tab === "memos") body = h(Memos, { notify, ask });
  else if (tab === "knowledge") body = h(Knowledge, { notify, ask });
  else if (tab === "profile") body = h(Profile, { notify });
  else if (tab === "groups") body = h(Groups, { notify, ask });
  else body = h(Maintenance, { notify, ask, job, onStarted: setJob });
  return h(
    "div",
    { className: "amc", "data-amc": "console" },
    h(
      "div",
      { className: "amc-head" },
      h("h2", null, "记忆管理"),
      h("div", { className: "amc-row" },
        job && job.state === "running" ? h("span", { className: "amc-warn" }, `${job.label}进行中 ${job.done}/${job.total || "?"}`) : null,
        h(Button, { onClick: () => { setMessage(null); setStatusKey((k) => k + 1); } }, "刷新")),
    ),
    h(
      "div",
      { className: "amc-tabs", role: "tablist" },
      TABS.map(([key, label]) =>
        h("button", { key, type: "button", role: "tab", className: "amc-tab", "aria-selected": tab === key ? "true" : "false", onClick: () => { setMessage(null); setTab(key); } }, label),
      ),
    ),
    h(Message, { message }),
    body,
    h(Confirm, { request: confirm, onClose: closeConfirm }),
  );
}
