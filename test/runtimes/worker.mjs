// workerd: GET /?origin=ORIGIN answers the report as JSON.
import { check } from './check.mjs';

export default {
  async fetch(request) {
    const origin = new URL(request.url).searchParams.get('origin');
    return Response.json(await check(origin));
  },
};
