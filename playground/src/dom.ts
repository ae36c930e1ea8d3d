type Child = Node | string | null | undefined | false;

/** Makes an element: `h('button', { class: 'x', onclick }, 'Reset')`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | EventListener | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === 'function') el.addEventListener(name.replace(/^on/, ''), value);
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child);
  }
  return el;
}

/** The width a chart may take inside `el`, px. */
export function widthOf(el: HTMLElement, fallback = 900): number {
  const w = el.getBoundingClientRect().width;
  return Math.max(260, Math.floor(w > 0 ? w : fallback));
}
