// One machine definition drawn as SVG from its layout (layout.ts): state boxes nested as in the
// definition, the active ones filled with a bold border, the transitions between siblings as
// arrows with their `event [guard]` lines, the others listed inside their source box. The
// transition the last event took is emphasised when it can be told: its event matches, its source
// was active before the event (when the caller knows) and its target is active now. No inline
// <style> (the page's CSP forbids it): classes only.
import { useId } from 'preact/hooks';
import type { MachineView } from '../../../src/system/observe/console.types.js';
import { eventMatches, METRICS, type BoxLabel, type ChartBox, type ChartEdge, type ChartLayout, type Point } from './layout.js';
import './charts.css';

export interface ChartProps {
  machine: MachineView;
  layout: ChartLayout;
  /** Full ids of the active state nodes (leaves and their ancestors). */
  active: ReadonlySet<string>;
  /** The type of the event the actor received last, as XState names it; null when none. */
  recent?: string | null;
  /** The active ids before that event, when known: they tell which of several matching transitions it took. */
  previous?: ReadonlySet<string> | null;
}

interface Emphasis {
  active: ReadonlySet<string>;
  previous: ReadonlySet<string> | null;
  recent: string | null;
}

/** Was `source` active before the last event (unknown: assumed)? */
const wasActive = (source: string, e: Emphasis) => e.previous === null || e.previous.has(source);

/** A path through dagre's points, smoothed with quadratic curves through the midpoints. */
function pathOf(points: Point[]): string {
  const [first, ...rest] = points;
  if (!first) return '';
  let d = `M${first.x},${first.y}`;
  for (let i = 0; i < rest.length - 1; i++) {
    const p = rest[i]!;
    const q = rest[i + 1]!;
    d += ` Q${p.x},${p.y} ${(p.x + q.x) / 2},${(p.y + q.y) / 2}`;
  }
  const last = rest[rest.length - 1];
  if (last) d += ` L${last.x},${last.y}`;
  return d;
}

/** Whether the last event took this edge: the event matches, it left an active state and its target is active now. */
function edgeTookRecent(edge: ChartEdge, e: Emphasis): boolean {
  const { recent } = e;
  if (!recent || edge.kind !== 'transition' || !wasActive(edge.from, e)) return false;
  return edge.transitions.some((t) => eventMatches(t.event, recent) && e.active.has(t.target));
}

/** Whether the last event took this listed transition (from an active state, into an active target or staying). */
function labelTookRecent(box: ChartBox, label: BoxLabel, e: Emphasis): boolean {
  if (!e.recent || !eventMatches(label.event, e.recent) || !wasActive(box.id, e)) return false;
  return label.targets.length === 0 ? e.active.has(box.id) : label.targets.every((t) => e.active.has(t));
}

const describe = (box: ChartBox, active: boolean): string =>
  `${box.parent === null ? 'machine' : box.type === 'final' ? 'final state' : 'state'} ${box.key}${box.initial ? ' (initial)' : ''}${active ? ' (active)' : ''}`;

function StateBox({ box, emphasis }: { box: ChartBox; emphasis: Emphasis }) {
  const active = emphasis.active.has(box.id);
  const classes = ['chart-state', `chart-state--${box.type}`, box.parent === null ? 'chart-state--root' : '', active ? 'chart-state--active' : ''];
  const centred = box.labels.length === 0 && box.type !== 'compound' && box.type !== 'parallel';
  const inset = 3;
  return (
    <g role="img" aria-label={describe(box, active)} class={classes.filter(Boolean).join(' ')} data-depth={box.depth}>
      <title>{box.id}</title>
      <rect class="chart-state-box" x={box.x} y={box.y} width={box.width} height={box.height} rx={8} ry={8} />
      {box.type === 'final' && (
        <rect class="chart-state-final" x={box.x + inset} y={box.y + inset} width={box.width - 2 * inset} height={box.height - 2 * inset} rx={6} ry={6} />
      )}
      <text
        class="chart-state-key"
        x={centred ? box.x + box.width / 2 : box.x + METRICS.padding}
        y={centred ? box.y + box.height / 2 : box.y + box.titleHeight / 2}
        text-anchor={centred ? 'middle' : 'start'}
        dominant-baseline="central"
      >
        {box.key}
      </text>
      {box.labels.map((label, i) => (
        <text
          key={i}
          class={`chart-label chart-label--${label.kind}${labelTookRecent(box, label, emphasis) ? ' chart-label--recent' : ''}`}
          x={label.x}
          y={label.y + label.height / 2}
          dominant-baseline="central"
        >
          <title>{label.full}</title>
          {label.text}
        </text>
      ))}
    </g>
  );
}

function Edge({ edge, emphasised, arrow, arrowRecent }: { edge: ChartEdge; emphasised: boolean; arrow: string; arrowRecent: string }) {
  const classes = `chart-edge chart-edge--${edge.kind}${emphasised ? ' chart-edge--recent' : ''}`;
  const tooltip = edge.transitions.map((t) => `${t.event}${t.guard ? ` [${t.guard}]` : ''} → ${t.target}`).join('\n');
  const { labelAt, labelWidth, labelHeight, lines } = edge;
  const top = labelAt.y - labelHeight / 2;
  return (
    <g class={classes}>
      {tooltip && <title>{tooltip}</title>}
      <path class="chart-edge-path" d={pathOf(edge.points)} marker-end={`url(#${emphasised ? arrowRecent : arrow})`} />
      {lines.length > 0 && (
        <>
          <rect class="chart-edge-label-bg" x={labelAt.x - labelWidth / 2} y={top} width={labelWidth} height={labelHeight} rx={3} ry={3} />
          <text class="chart-edge-label" x={labelAt.x} text-anchor="middle">
            {lines.map((line, i) => (
              <tspan key={i} x={labelAt.x} y={top + 1 + (i + 0.5) * METRICS.lineHeight} dominant-baseline="central">
                {line}
              </tspan>
            ))}
          </text>
        </>
      )}
    </g>
  );
}

export function Chart({ machine, layout, active, recent = null, previous = null }: ChartProps) {
  const emphasis: Emphasis = { active, previous, recent };
  const uid = useId().replace(/[^A-Za-z0-9_-]/g, '');
  const arrow = `chart-arrow-${uid}`;
  const arrowRecent = `chart-arrow-recent-${uid}`;
  // Parents first, so children (and then every edge) are drawn over their parent's fill.
  const boxes = [...layout.boxes].sort((a, b) => a.depth - b.depth);
  const activeNames = layout.boxes.filter((b) => b.parent !== null && active.has(b.id)).map((b) => b.key);
  return (
    <svg
      class="chart"
      viewBox={`0 0 ${layout.width} ${layout.height}`}
      width={layout.width}
      height={layout.height}
      role="group"
      aria-label={`State chart of ${machine.id}${activeNames.length ? `, active: ${activeNames.join(', ')}` : ''}`}
    >
      <defs>
        <marker id={arrow} class="chart-arrow" viewBox="0 0 10 10" refX={9} refY={5} markerWidth={7} markerHeight={7} orient="auto-start-reverse">
          <path d="M0,0 L10,5 L0,10 z" />
        </marker>
        <marker id={arrowRecent} class="chart-arrow chart-arrow--recent" viewBox="0 0 10 10" refX={9} refY={5} markerWidth={7} markerHeight={7} orient="auto-start-reverse">
          <path d="M0,0 L10,5 L0,10 z" />
        </marker>
      </defs>
      {boxes.map((box) => (
        <StateBox key={box.id} box={box} emphasis={emphasis} />
      ))}
      {layout.dots.map((dot) => (
        <circle key={`dot ${dot.parent}`} class="chart-initial-dot" cx={dot.x} cy={dot.y} r={dot.r} />
      ))}
      {layout.edges.map((edge) => (
        <Edge key={edge.id} edge={edge} emphasised={edgeTookRecent(edge, emphasis)} arrow={arrow} arrowRecent={arrowRecent} />
      ))}
    </svg>
  );
}
