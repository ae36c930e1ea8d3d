// uPlot ships its types as dist/uPlot.d.ts, which its package.json does not point to.
declare module 'uplot' {
  import uPlot from 'uplot/dist/uPlot.js';
  export default uPlot;
}
