// Drives the system Chromium with playwright-core for the approval-page tests.
// One command per stdin line, a JSON array; one JSON reply per stdout line,
// {"ok": true, "result": …} or {"ok": false, "error": "…"}. Every wait is bounded.
//   ["open", TAB, URL, WIDTH?, HEIGHT?]   a new tab (all tabs share one browser context)
//   ["reload", TAB] / ["close", TAB]
//   ["count", TAB, SELECTOR]              -> number of matches
//   ["text", TAB, SELECTOR]               -> innerText of the first match (null if none)
//   ["texts", TAB, SELECTOR]              -> innerText of every match
//   ["attrs", TAB, SELECTOR, NAME]        -> attribute NAME of every match
//   ["wait-count", TAB, SELECTOR, N, MS]  -> ms until exactly N match
//   ["wait-text", TAB, SELECTOR, TEXT, MS]-> ms until the first match contains TEXT
//   ["wait-change", TAB, SELECTOR, MS]    -> the first match's innerText once it changes
//   ["key", TAB, KEY] / ["type", TAB, TEXT] / ["click", TAB, SELECTOR]
//   ["active", TAB]                       -> {tag, class, grant} of the focused element
//   ["overflow", TAB]                     -> how far the page is wider than the viewport (px)
//   ["problems", TAB]                     -> console errors (CSP violations among them) and
//                                            uncaught exceptions seen in the tab
//   ["screenshot", TAB, PATH]
//   ["quit"]
const { chromium } = require('playwright-core');
const readline = require('readline');

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let closing = false;
  browser.on('disconnected', () => {
    if (closing) return;
    process.stderr.write('browser.js: the browser went away\n');
    process.exit(3);
  });
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  context.setDefaultTimeout(15000);
  const tabs = new Map();
  const problems = new Map();
  const reply = (value) => process.stdout.write(JSON.stringify(value) + '\n');
  const tab = (name) => {
    const page = tabs.get(name);
    if (!page) throw new Error(`no tab ${name}`);
    return page;
  };
  const since = (started) => Date.now() - started;

  const commands = {
    async open(name, url, width, height) {
      const page = await context.newPage();
      if (width) await page.setViewportSize({ width: Number(width), height: Number(height) });
      const seen = [];
      problems.set(name, seen);
      page.on('console', (m) => { if (m.type() === 'error') seen.push(m.text()); });
      page.on('pageerror', (e) => seen.push(String(e)));
      page.on('crash', () => seen.push('the tab crashed'));
      await page.goto(url);
      tabs.set(name, page);
      return page.locator('.member').count();
    },
    async reload(name) { await tab(name).reload(); return 'ok'; },
    async close(name) { await tab(name).close(); tabs.delete(name); return 'ok'; },
    async count(name, selector) { return tab(name).locator(selector).count(); },
    async text(name, selector) {
      const found = tab(name).locator(selector);
      return (await found.count()) ? found.first().innerText() : null;
    },
    async texts(name, selector) { return tab(name).locator(selector).allInnerTexts(); },
    async attrs(name, selector, attribute) {
      return tab(name).locator(selector).evaluateAll((els, a) => els.map((e) => e.getAttribute(a)), attribute);
    },
    async 'wait-count'(name, selector, n, ms) {
      const started = Date.now();
      await tab(name).waitForFunction(([s, n]) => document.querySelectorAll(s).length === n,
        [selector, Number(n)], { timeout: Number(ms), polling: 'raf' });
      return since(started);
    },
    async 'wait-text'(name, selector, text, ms) {
      const started = Date.now();
      await tab(name).waitForFunction(([s, t]) => {
        const el = document.querySelector(s);
        return el !== null && el.innerText.includes(t);
      }, [selector, text], { timeout: Number(ms), polling: 'raf' });
      return since(started);
    },
    async 'wait-change'(name, selector, ms) {
      const page = tab(name);
      const before = await page.locator(selector).first().innerText();
      await page.waitForFunction(([s, b]) => {
        const el = document.querySelector(s);
        return el !== null && el.innerText !== b;
      }, [selector, before], { timeout: Number(ms), polling: 100 });
      return page.locator(selector).first().innerText();
    },
    async key(name, key) { await tab(name).keyboard.press(key); return 'ok'; },
    async type(name, text) { await tab(name).keyboard.type(text); return 'ok'; },
    async click(name, selector) { await tab(name).locator(selector).first().click(); return 'ok'; },
    async active(name) {
      return tab(name).evaluate(() => {
        const e = document.activeElement;
        const member = e && e.closest ? e.closest('.member') : null;
        return { tag: e ? e.tagName.toLowerCase() : null, class: e ? e.className : null,
                 grant: member ? member.dataset.grant : null };
      });
    },
    async overflow(name) {
      return tab(name).evaluate(() => document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth);
    },
    async problems(name) { return problems.get(name) || []; },
    async screenshot(name, path) { await tab(name).screenshot({ path, fullPage: true }); return 'ok'; },
  };

  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (process.env.AML_BROWSER_TRACE) process.stderr.write(`browser.js: ${line}\n`);
    let command;
    try {
      command = JSON.parse(line);
    } catch (error) {
      reply({ ok: false, error: `not a JSON command: ${line}` });
      continue;
    }
    const [name, ...args] = command;
    if (name === 'quit') break;
    try {
      const run = commands[name];
      if (!run) throw new Error(`unknown command ${name}`);
      reply({ ok: true, result: await run(...args) });
    } catch (error) {
      reply({ ok: false, error: String(error) });
    }
  }
  closing = true;
  await browser.close();
  process.exit(0);
})();
