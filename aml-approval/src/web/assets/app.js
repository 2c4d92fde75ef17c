// The approval page's script, served as /app.js (the CSP allows no inline script).
// Live updates from GET /api/v1/events, countdowns, decisions without leaving the page,
// keyboard use. Without it the page still works: its forms post to /decide.
//
// Every change from the server carries `seq`, one more than the one before; changes are
// applied strictly in order, and a gap (a missed change) makes the tab fetch a fresh
// snapshot. Tabs of one page share one stream: the tab holding a Web Lock named after the
// page opens it and relays every change to the others on a BroadcastChannel (a browser
// keeps only about six connections per host, and each open stream holds one).
'use strict';
(() => {
  const body = document.body;
  const token = body.dataset.token;
  if (!token) return; // the answer page of a form decision
  const live = document.getElementById('live');
  const groups = document.getElementById('groups');
  const empty = document.getElementById('empty');
  const historyList = document.getElementById('history-list');
  const filter = {
    tool: (body.dataset.filterTool || '').toLowerCase(),
    caller: (body.dataset.filterCaller || '').toLowerCase(),
  };
  const auth = { Authorization: 'Bearer ' + token };
  const HISTORY_SHOWN = 200;
  let seq = Number(body.dataset.seq);
  let offset = Number(body.dataset.nowMs) - Date.now(); // the server's clock minus ours
  let liveState = { state: 'reconnecting', text: 'Live updates: connecting…' };

  const fragment = (html) => {
    const template = document.createElement('template');
    template.innerHTML = html; // the server's own HTML, every proposal field escaped there
    return template.content;
  };
  const members = () => [...document.querySelectorAll('.member')];
  const say = (member, text) => {
    const status = member && member.querySelector('.status');
    if (status) status.textContent = text;
  };

  function setLive(state, text) {
    liveState = { state, text };
    live.dataset.state = state;
    live.textContent = text;
  }

  // --- Changes, in order ---------------------------------------------------------------
  function apply(name, data) {
    if (name === 'snapshot') return applySnapshot(data);
    if (typeof data.seq !== 'number' || data.seq <= seq) return; // already applied
    if (data.seq !== seq + 1) return resync(); // a change was missed
    seq = data.seq;
    if (name === 'pending') addPending(data);
    else if (name === 'outcome') addOutcome(data);
    refresh();
  }

  function applySnapshot(data) {
    if (typeof data.seq !== 'number' || data.seq < seq) return; // older than what we show
    const kept = remember();
    groups.replaceChildren(fragment(data.html));
    seq = data.seq;
    offset = data.now_ms - Date.now();
    restore(kept);
    refresh();
  }

  function addPending(data) {
    const pending = data.pending;
    if (document.getElementById('m-' + pending.grant_id)) return;
    const group = document.getElementById('g-' + pending.proposal_sha256);
    if (group) group.querySelector('.members').append(fragment(data.member_html));
    else groups.append(fragment(data.group_html));
  }

  function addOutcome(data) {
    const outcome = data.outcome;
    const member = document.getElementById('m-' + outcome.grant_id);
    if (member) {
      const focused = member.contains(document.activeElement);
      const list = members();
      const at = list.indexOf(member);
      const next = list[at + 1] || list[at - 1];
      const group = member.closest('.proposal');
      member.remove();
      if (group && !group.querySelector('.member')) group.remove();
      if (focused && next) next.focus();
    }
    if (matches(outcome)) {
      const row = fragment(data.history_html).firstElementChild;
      row.classList.add('fresh');
      const none = historyList.querySelector('.empty');
      if (none) none.remove();
      historyList.prepend(row);
      while (historyList.children.length > HISTORY_SHOWN) historyList.lastElementChild.remove();
    }
  }

  function matches(outcome) {
    const caller = ((outcome.requester && outcome.requester.caller) || '').toLowerCase();
    return outcome.tool.toLowerCase().includes(filter.tool) &&
      (!filter.caller || (caller !== '' && caller.includes(filter.caller)));
  }

  // What the person was doing, kept across a snapshot that redraws the list.
  function remember() {
    const active = document.activeElement;
    const member = active && active.closest ? active.closest('.member') : null;
    const reasons = {};
    for (const input of groups.querySelectorAll('input.reason')) {
      if (input.value) reasons[input.closest('.member').dataset.grant] = input.value;
    }
    return { grant: member && member.dataset.grant, role: active && active.className, reasons };
  }

  function restore(kept) {
    for (const [grant, value] of Object.entries(kept.reasons)) {
      const member = document.getElementById('m-' + grant);
      if (member) member.querySelector('input.reason').value = value;
    }
    const member = kept.grant && document.getElementById('m-' + kept.grant);
    if (!member) return;
    const control = kept.role && [...member.querySelectorAll('button, input')].find((c) => c.className === kept.role);
    (control || member).focus();
  }

  // Counts, the empty note, the title, local times and the countdowns.
  function refresh() {
    for (const group of groups.querySelectorAll('.proposal')) {
      const n = group.querySelectorAll('.member').length;
      const same = group.querySelector('.same');
      same.querySelector('.n').textContent = String(n);
      same.hidden = n < 2;
    }
    const waiting = members().length;
    empty.hidden = waiting > 0;
    document.title = (waiting ? '(' + waiting + ') ' : '') + 'Pending proposals — AML approvals';
    for (const time of document.querySelectorAll('time[data-ms]:not([data-local])')) {
      time.textContent = new Date(Number(time.dataset.ms)).toLocaleString();
      time.dataset.local = '1';
    }
    tick();
  }

  function tick() {
    const now = Date.now() + offset;
    for (const countdown of document.querySelectorAll('.countdown[data-expires-at-ms]')) {
      const left = Math.max(0, Math.floor((Number(countdown.dataset.expiresAtMs) - now) / 1000));
      const [h, m, s] = [Math.floor(left / 3600), Math.floor(left / 60) % 60, left % 60];
      const two = (n) => String(n).padStart(2, '0');
      countdown.textContent = left === 0 ? 'expiring' : (h > 0 ? h + ':' + two(m) : String(m)) + ':' + two(s) + ' left';
      countdown.classList.toggle('soon', left < 30);
    }
  }

  // A fresh snapshot (and the history list) after a gap or at start.
  let resyncing = false;
  let again = false;
  async function resync() {
    if (resyncing) {
      again = true;
      return;
    }
    resyncing = true;
    try {
      do {
        again = false;
        const pending = await fetch('/api/v1/pending?view=page', { headers: auth });
        if (pending.ok) applySnapshot(await pending.json());
        const query = new URLSearchParams({ view: 'page', tool: filter.tool, caller: filter.caller });
        const history = await fetch('/api/v1/history?' + query, { headers: auth });
        if (history.ok) {
          historyList.replaceChildren(fragment((await history.json()).html));
          refresh();
        }
      } while (again);
    } catch (error) {
      setLive('reconnecting', 'Live updates interrupted (' + error + '); retrying…');
    } finally {
      resyncing = false;
    }
  }

  // --- The stream, shared by the page's tabs --------------------------------------------
  const name = 'aml-approvals-' + body.dataset.instance;
  const channel = 'BroadcastChannel' in window && navigator.locks ? new BroadcastChannel(name) : null;

  function openStream() {
    const events = new EventSource('/api/v1/events?view=page&t=' + encodeURIComponent(token));
    const status = (state, text) => {
      setLive(state, text);
      if (channel) channel.postMessage({ kind: 'status', state, text });
    };
    events.onopen = () => status('live', 'Live: new proposals appear as they arrive.');
    events.onerror = () => {
      if (events.readyState === EventSource.CLOSED) {
        status('off', 'Live updates stopped: the page refused the stream (it may have restarted under a new URL). Reload.');
      } else {
        status('reconnecting', 'Live updates interrupted; reconnecting…');
      }
    };
    for (const kind of ['snapshot', 'pending', 'outcome']) {
      events.addEventListener(kind, (event) => {
        const data = JSON.parse(event.data);
        apply(kind, data);
        if (channel) channel.postMessage({ kind: 'change', name: kind, data });
      });
    }
    events.addEventListener('bye', (event) => {
      events.close();
      status('off', 'Live updates stopped: ' + JSON.parse(event.data).why + '. Reload to resume.');
    });
  }

  if (channel) {
    let leading = false;
    channel.onmessage = (message) => {
      const m = message.data;
      if (m.kind === 'change') apply(m.name, m.data);
      else if (m.kind === 'status') setLive(m.state, m.text);
      else if (m.kind === 'hello' && leading) channel.postMessage({ kind: 'status', ...liveState });
    };
    setLive('reconnecting', 'Live updates: connecting…');
    // Held until the tab closes; then the next tab in line opens the stream.
    navigator.locks.request(name, () => {
      leading = true;
      openStream();
      return new Promise(() => {});
    });
    channel.postMessage({ kind: 'hello' });
    resync();
  } else {
    openStream();
    resync();
  }

  // --- Decisions without leaving the page -----------------------------------------------
  document.addEventListener('submit', async (event) => {
    const form = event.target;
    if (!form.matches('.approve-form, .deny-form')) return;
    event.preventDefault();
    const member = form.closest('.member');
    const fields = new FormData(form);
    const decision = form.matches('.approve-form') ? 'approve' : 'deny';
    const request = { grant_id: fields.get('grant_id'), proposal_sha256: fields.get('proposal_sha256'), decision };
    const reason = String(fields.get('reason') || '').trim();
    if (decision === 'deny' && reason) request.reason = reason;
    const buttons = member.querySelectorAll('button');
    // A disabled button loses focus; the request keeps it, so the next one gets it after.
    if (member.contains(document.activeElement)) member.focus();
    for (const button of buttons) button.disabled = true;
    say(member, decision === 'approve' ? 'Approving…' : 'Denying…');
    try {
      const response = await fetch('/api/v1/decide', {
        method: 'POST',
        headers: { ...auth, 'Content-Type': 'application/json' },
        body: JSON.stringify(request),
      });
      const answer = await response.json();
      // A decided request leaves the list with the outcome change; until then:
      say(member, response.ok ? (answer.outcome.outcome === 'approved' ? 'Approved.' : 'Denied.') : answer.message);
      if (!response.ok) for (const button of buttons) button.disabled = false;
    } catch (error) {
      say(member, 'The decision could not be sent (' + error + '); nothing was decided.');
      for (const button of buttons) button.disabled = false;
    }
  });

  // --- Keyboard ---------------------------------------------------------------------------
  document.addEventListener('keydown', (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target instanceof Element ? event.target : null;
    const current = target && target.closest('.member');
    if (event.key === 'Escape') {
      if (current) {
        say(current, '');
        current.focus();
        event.preventDefault();
      }
      return;
    }
    if (target && target.matches('input, textarea, select')) return;
    const list = members();
    if (!list.length) return;
    const at = current ? list.indexOf(current) : -1;
    const chosen = current || list[0];
    const go = (i) => list[Math.max(0, Math.min(list.length - 1, i))].focus();
    switch (event.key) {
      case 'j':
      case 'ArrowDown':
        go(at + 1);
        break;
      case 'k':
      case 'ArrowUp':
        go(at < 0 ? 0 : at - 1);
        break;
      case 'a':
        chosen.querySelector('button.approve').focus();
        say(chosen, 'Enter approves this request; Esc goes back.');
        break;
      case 'd':
        chosen.querySelector('input.reason').focus();
        say(chosen, 'A reason for the agent if you like, then Enter denies; Esc goes back.');
        break;
      default:
        return;
    }
    event.preventDefault();
  });

  setInterval(tick, 1000);
  refresh();
})();
