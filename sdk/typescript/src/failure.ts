/**
 * Why a reconcile produced no outcome: throw {@link Transient} or {@link Terminal}.
 * @module
 */

/** What a failure may carry besides its message. */
export interface FailureOptions {
  /**
   * The parent's new `status` (a JSON object), written before the host backs
   * off (only when it differs), so the parent says why while the host waits:
   * e.g. a `Ready` condition `False` with a reason.
   */
  status?: object;
  /** The error that caused it (`Error.cause`). */
  cause?: unknown;
}

/**
 * Why a reconcile produced no outcome. Nothing of the reconcile is written
 * but the status the failure carries, if any.
 *
 * Throw one of the two subclasses from `reconcile`:
 * - {@link Transient}: may succeed later (a dependency is not ready). The host
 *   retries with per-object exponential backoff (5 ms doubling up to 1000 s);
 *   `request.attempt` counts the failures in a row.
 * - {@link Terminal}: retrying cannot help (the spec is invalid). The host
 *   records a warning event and does not retry until the object changes.
 *
 * ```ts
 * throw new Terminal("spec.image must not be empty", { status: { phase: "Invalid" } });
 * ```
 *
 * Any other exception escaping `reconcile` is a bug in the reconciler: it
 * traps the component (the host logs it and retries with backoff), as a
 * panic does in Rust.
 */
export abstract class Failure extends Error {
  /** Whether retrying cannot help. */
  abstract readonly terminal: boolean;
  /** The parent's status to write before backing off, or undefined to leave it. */
  readonly status: object | undefined;

  constructor(message: string, options: FailureOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const status = options.status;
    if (status !== undefined && (typeof status !== "object" || status === null || Array.isArray(status))) {
      throw new TypeError("a failure's status must be a JSON object");
    }
    this.status = status;
  }

  /** The same kind of failure, its message prefixed with `context: ` (its status kept). */
  context(context: string): this {
    return this.with(`${context}: ${this.message}`, this.status) as this;
  }

  /** The same failure carrying `status` (see {@link FailureOptions.status}). */
  withStatus(status: object): this {
    return this.with(this.message, status) as this;
  }

  private with(message: string, status: object | undefined): Failure {
    const Kind = this.constructor as new (message: string, options?: FailureOptions) => Failure;
    return new Kind(message, { status, cause: this.cause });
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
