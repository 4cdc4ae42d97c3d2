"""What the page's look needs beyond Gradio's components: a script run once on load (`demo.load(js=ON_LOAD_JS)`)
that names what each of the framework's own "Record"/"Stop" buttons records or stops ("Stop webcam", "Stop
microphone": beside the page's "Stop stream" and "Stop speaking" there would otherwise be four bare "Stop"s), and a
few style rules (alert thumbnails shown whole with their captions under them, the alert clip's player kept small).
"""

from __future__ import annotations

import json

# the framework's button -> the words after its own label, by the id of the component it belongs to
NAMED_BUTTONS = {"sv-webcam": "webcam", "sv-mic": "microphone"}

CSS = """
#sv-alert-gallery .thumbnail-item img, #sv-alert-gallery .thumbnail-item video { object-fit: contain !important; }
#sv-alert-gallery .caption-label { position: static !important; display: block !important; max-width: 100%;
  white-space: normal !important; overflow: visible !important; font-size: 12px; line-height: 1.2;
  background: none !important; color: var(--body-text-color) !important; padding: 2px 0 0 0 !important; }
#sv-alert-gallery .thumbnail-item { height: auto !important; flex-direction: column; }
#sv-alert-clip video { max-height: 240px; object-fit: contain; }
"""

ON_LOAD_JS = """() => {
  const named = %s;
  const relabel = () => {
    for (const [id, what] of Object.entries(named)) {
      for (const button of document.querySelectorAll(`#${id} button`)) {
        const walker = document.createTreeWalker(button, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const text = node.data.trim();
          if (text === "Stop" || text === "Record") {
            node.data = `${text} ${what}`;
            if (button.hasAttribute("aria-label")) button.setAttribute("aria-label", node.data);
          }
        }
      }
    }
  };
  const style = document.createElement("style");
  style.textContent = %s;
  document.head.appendChild(style);
  new MutationObserver(relabel).observe(document.body, {subtree: true, childList: true, characterData: true});
  relabel();
}""" % (json.dumps(NAMED_BUTTONS), json.dumps(CSS))
