// The in-cluster console's sign-in page: a plain form (no script, so the console's
// Content-Security-Policy holds), posted to the console itself.

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text made safe to put into HTML, as text or in a quoted attribute. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

export function signInPage(problem?: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · AgentRun console</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem; color: #1a1a1a; }
  textarea { width: 100%; font: 14px ui-monospace, monospace; }
  .problem { color: #8a1c1c; border-left: 4px solid #8a1c1c; padding-left: .75rem; }
  button { font: inherit; padding: .4rem 1.2rem; margin-top: .75rem; }
</style>
</head>
<body>
<main>
<h1>Sign in to the AgentRun console</h1>
${problem ? `<p class="problem" role="alert">${escapeHtml(problem)}</p>\n` : ""}<p>This console acts as you: every read and action is sent to the API server with your own token, so
your RBAC permissions decide what you see and may do, exactly as with kubectl.</p>
<form method="post" action="./signin">
<label for="token">Your bearer token (for example from <code>kubectl create token NAME</code>, or your OIDC ID token)</label>
<textarea id="token" name="token" rows="6" autocomplete="off" spellcheck="false" required></textarea>
<button type="submit">Sign in</button>
</form>
<p>The token is checked by the API server, kept on the console's server (never in the browser), and
forgotten when you sign out or after eight hours.</p>
</main>
</body>
</html>
`;
}
