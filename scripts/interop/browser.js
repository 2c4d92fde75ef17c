// Drives the system Chromium with playwright-core for the approval-page tests.
// One command per stdin line, one JSON reply per stdout line:
//   open TAB URL                       -> number of proposals shown
//   click TAB approve|deny DIGEST      -> the result text of the page the click leads to
//   screenshot TAB PATH                -> "ok"
//   quit
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
  const reply = (value) => process.stdout.write(JSON.stringify(value) + '\n');
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [command, tab, ...rest] = line.trim().split(' ');
    if (process.env.AML_BROWSER_TRACE) process.stderr.write(`browser.js: ${line}\n`);
    try {
      if (command === 'quit') break;
      if (command === 'open') {
        const page = await context.newPage();
        page.on('crash', () => process.stderr.write(`browser.js: tab ${tab} crashed\n`));
        await page.goto(rest[0]);
        tabs.set(tab, page);
        reply({ ok: true, result: await page.locator('section.proposal').count() });
      } else if (command === 'click') {
        const [decision, digest] = rest;
        const page = tabs.get(tab);
        const button = page.locator(`section.proposal[data-digest="${digest}"] button.${decision}`);
        await Promise.all([page.waitForURL('**/decide'), button.click()]);
        reply({ ok: true, result: await page.locator('p.result').innerText() });
      } else if (command === 'screenshot') {
        await tabs.get(tab).screenshot({ path: rest[0], fullPage: true });
        reply({ ok: true, result: 'ok' });
      } else {
        reply({ ok: false, error: `unknown command ${command}` });
      }
    } catch (error) {
      reply({ ok: false, error: String(error) });
    }
  }
  closing = true;
  await browser.close();
  process.exit(0);
})();
