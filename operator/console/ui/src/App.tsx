// The console: a header (product, navigation, kube context, Live indicator) and one of three pages
// by the URL's hash: #/ the runs, #/runs/NS/NAME one run, #/queue the runs that need a person.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ApiError, getSession, isSessionMissing, NEEDS_SESSION, onSessionMissing, UNREACHABLE } from "./api.ts";
import type { Session } from "./api.ts";
import { Notice, useTitle } from "./common.tsx";
import { QueuePage } from "./QueuePage.tsx";
import { RunPage } from "./RunPage.tsx";
import { runsStore, useRuns } from "./runs.ts";
import { RunsPage } from "./RunsPage.tsx";
import { isLive, onLiveChange } from "./stream.ts";

export type Route = { page: "runs" } | { page: "queue" } | { page: "run"; namespace: string; name: string } | { page: "missing"; hash: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "").replace(/\/+$/, "");
  if (path === "" || path === "/runs") return { page: "runs" };
  if (path === "/queue") return { page: "queue" };
  const run = /^\/runs\/([^/]+)\/([^/]+)$/.exec(path);
  if (run?.[1] && run[2]) {
    try {
      return { page: "run", namespace: decodeURIComponent(run[1]), name: decodeURIComponent(run[2]) };
    } catch {
      // a malformed escape: not a page
    }
  }
  return { page: "missing", hash };
}

function useRoute(): Route {
  const [hash, setHash] = useState(() => location.hash);
  useEffect(() => {
    const changed = () => setHash(location.hash);
    addEventListener("hashchange", changed);
    // The hash may have changed between the first render and this listener.
    changed();
    return () => removeEventListener("hashchange", changed);
  }, []);
  return useMemo(() => parseRoute(hash), [hash]);
}

function useLive(): boolean {
  const [live, setLive] = useState(isLive);
  useEffect(() => {
    setLive(isLive());
    return onLiveChange(() => setLive(isLive()));
  }, []);
  return live;
}

type SessionState = { state: "loading" } | { state: "ok"; session: Session } | { state: "error"; message: string };

function useSession(): SessionState {
  const [session, setSession] = useState<SessionState>({ state: "loading" });
  useEffect(() => {
    let stopped = false;
    let retry: ReturnType<typeof setTimeout> | undefined;
    const load = () => {
      getSession().then(
        (s) => {
          if (stopped) return;
          setSession({ state: "ok", session: s });
          runsStore.addNamespace(s.namespace);
        },
        (err: unknown) => {
          if (stopped) return;
          const status = err instanceof ApiError ? err.status : 0;
          setSession({ state: "error", message: err instanceof ApiError ? err.message : UNREACHABLE });
          // Only the session link helps a 401; anything else may pass.
          if (status !== 401) retry = setTimeout(load, 3000);
        },
      );
    };
    load();
    return () => {
      stopped = true;
      if (retry !== undefined) clearTimeout(retry);
    };
  }, []);
  return session;
}

function useSessionMissing(): boolean {
  const [missing, setMissing] = useState(isSessionMissing);
  useEffect(() => {
    setMissing(isSessionMissing());
    return onSessionMissing(() => setMissing(true));
  }, []);
  return missing;
}

function Header({ route, session, needPerson }: { route: Route; session: SessionState; needPerson: number }) {
  const live = useLive();
  const current = (page: Route["page"]) => (route.page === page || (page === "runs" && route.page === "run") ? "page" : undefined);
  return (
    <header class="top">
      <a
        class="skip"
        href="#main"
        onClick={(e) => {
          e.preventDefault();
          document.getElementById("main")?.focus();
        }}
      >
        Skip to content
      </a>
      <span class="brand">
        <span class="brand-name">agent-watchdog</span> console
      </span>
      <nav aria-label="Console">
        <a href="#/" aria-current={current("runs")}>
          Runs
        </a>
        <a href="#/queue" aria-current={current("queue")}>
          Queue{" "}
          <span class={needPerson > 0 ? "count attention" : "count"} data-testid="queue-count">
            <span class="sr-only">(</span>
            {needPerson}
            <span class="sr-only"> need a person)</span>
          </span>
        </a>
      </nav>
      <div class="session">
        {session.state === "ok" && (
          <>
            <span title={session.session.server}>
              <span class="session-label">context</span> {session.session.context || "-"}
            </span>
            <span>
              <span class="session-label">user</span> {session.session.user || "-"}
            </span>
          </>
        )}
        <span class={live ? "live on" : "live off"}>
          <span class="dot" aria-hidden="true" />
          <span data-testid="live">{live ? "Live" : "Reconnecting…"}</span>
        </span>
      </div>
    </header>
  );
}

export function App() {
  const route = useRoute();
  const session = useSession();
  const missing = useSessionMissing();
  const view = useRuns();
  const [phase, setPhase] = useState("");
  const main = useRef<HTMLElement>(null);
  const first = useRef(true);

  // One runs stream for the whole app, first for the kubeconfig's default namespace (as kubectl
  // does); the Runs page's namespace filter reopens it.
  useEffect(() => {
    if (!missing && session.state === "ok" && !runsStore.started) runsStore.open(session.session.namespace);
  }, [missing, session]);

  // A new page: move focus to its heading, as a screen reader user would expect after a link.
  const routeKey = route.page === "run" ? `run/${route.namespace}/${route.name}` : route.page;
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    scrollTo(0, 0);
    const heading = main.current?.querySelector("h1");
    if (heading instanceof HTMLElement) heading.focus({ preventScroll: true });
  }, [routeKey]);

  let content;
  if (missing || (session.state === "error" && session.message === NEEDS_SESSION)) {
    content = <SessionMissing />;
  } else if (route.page === "runs") {
    content = <RunsPage view={view} session={session.state === "ok" ? session.session : undefined} phase={phase} setPhase={setPhase} />;
  } else if (route.page === "queue") {
    content = <QueuePage view={view} />;
  } else if (route.page === "run") {
    content = <RunPage key={routeKey} namespace={route.namespace} name={route.name} />;
  } else {
    content = <NotFound />;
  }

  return (
    <>
      <Header route={route} session={session} needPerson={view.needPerson} />
      <main id="main" ref={main} tabIndex={-1}>
        {session.state === "error" && session.message !== NEEDS_SESSION && !missing && <Notice kind="error">{session.message}</Notice>}
        {content}
      </main>
    </>
  );
}

function SessionMissing() {
  useTitle("Session needed");
  return (
    <>
      <h1 tabIndex={-1}>Session needed</h1>
      <Notice kind="error">{NEEDS_SESSION}</Notice>
      <p>
        Run <code>kubectl agentrun console</code> and open the link it prints: it carries the session token, which the console keeps in a cookie
        for this browser.
      </p>
      <p>
        If this console runs in the cluster, <a href="./signin">sign in</a> with your own token.
      </p>
    </>
  );
}

function NotFound() {
  useTitle("Page not found");
  return (
    <>
      <h1 tabIndex={-1}>Page not found</h1>
      <p>
        The console has no such page. Go to the <a href="#/">runs</a> or the <a href="#/queue">queue</a>.
      </p>
    </>
  );
}
