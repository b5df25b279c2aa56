/**
 * Why a reconcile produced no outcome: throw {@link Transient} or {@link Terminal}.
 * @module
 */

/**
 * Why a reconcile produced no outcome. Nothing of the reconcile is written.
 *
 * Throw one of the two subclasses from `reconcile`:
 * - {@link Transient}: may succeed later (a dependency is not ready). The host
 *   retries with per-object exponential backoff (5 ms doubling up to 1000 s);
 *   `request.attempt` counts the failures in a row.
 * - {@link Terminal}: retrying cannot help (the spec is invalid). The host
 *   records a warning event and does not retry until the object changes.
 *
 * Any other exception escaping `reconcile` is a bug in the reconciler: it
 * traps the component (the host logs it and retries with backoff), as a
 * panic does in Rust.
 */
export abstract class Failure extends Error {
  /** Whether retrying cannot help. */
  abstract readonly terminal: boolean;

  /** The same kind of failure, its message prefixed with `context: `. */
  context(context: string): Failure {
    const Kind = this.constructor as new (message: string) => Failure;
    return new Kind(`${context}: ${this.message}`);
  }
}

/** A failure the host retries with backoff. */
export class Transient extends Failure {
  readonly terminal = false;
  override readonly name = "Transient";
}

/** A failure the host does not retry until the object changes. */
export class Terminal extends Failure {
  readonly terminal = true;
  override readonly name = "Terminal";
}
