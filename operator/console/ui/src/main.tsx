// The console's browser app. Built by Vite (operator/console/ui/vite.config.ts) into static files
// the console's server serves; everything it needs is in the bundle (no fonts, no CDN).
import { render } from "preact";
import { App } from "./App.tsx";
import "./style.css";

const root = document.getElementById("app");
if (root) render(<App />, root);
