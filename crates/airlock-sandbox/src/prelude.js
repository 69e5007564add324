// Evaluated once per run, before the model's code. It builds the `tools`
// object, makes the clock and `Math.random` the run's own, and returns the
// function the host settles bridge calls with. Everything it relies on is
// captured here, before the model's code runs, so code that replaces
// globals or prototypes afterwards changes only its own view.
(function (call, names, seed, clock, write) {
  "use strict";
  const P = Promise;
  const E = Error;
  const freeze = Object.freeze;
  const create = Object.create;
  const define = Object.defineProperty;
  const construct = Reflect.construct;
  const imul = Math.imul;
  const RealDate = Date;

  // Bridge calls waiting for the host, by sequence number.
  const waiting = create(null);
  const tools = create(null);
  for (let i = 0; i < names.length; i++) {
    const source = names[i][0];
    const tool = names[i][1];
    const exposed = names[i][2];
    if (!(source in tools)) tools[source] = create(null);
    tools[source][tool] = function (args) {
      // Throws at once for bad arguments or a spent call budget.
      const seq = call(exposed, args);
      return new P(function (resolve, reject) {
        waiting[seq] = [resolve, reject];
      });
    };
  }
  for (const source in tools) freeze(tools[source]);
  define(globalThis, "tools", { value: freeze(tools), writable: false, configurable: false });

  // The run's clock: the moment the run began, for every reading.
  const FixedDate = new Proxy(RealDate, {
    construct(target, args, newTarget) {
      return construct(target, args.length === 0 ? [clock] : args, newTarget);
    },
    apply() {
      return new RealDate(clock).toString();
    },
  });
  RealDate.now = function now() {
    return clock;
  };
  define(RealDate.prototype, "constructor", { value: FixedDate });
  define(globalThis, "Date", { value: FixedDate, writable: true, configurable: true });

  // A seeded generator (mulberry32): a resumed run draws the same numbers.
  let state = seed | 0;
  Math.random = function random() {
    state = (state + 0x6d2b79f5) | 0;
    let t = state;
    t = imul(t ^ (t >>> 15), t | 1);
    t ^= t + imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };

  const console = create(null);
  console.log = write;
  console.info = write;
  console.warn = write;
  console.error = write;
  define(globalThis, "console", { value: freeze(console), writable: true, configurable: true });

  return function settle(seq, ok, value) {
    const w = waiting[seq];
    delete waiting[seq];
    if (ok) {
      w[0](value);
    } else {
      const e = new E(value.message);
      e.code = value.code;
      w[1](e);
    }
  };
})
