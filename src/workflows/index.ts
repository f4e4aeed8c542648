/** Every workflow the worker registers (bundled from this file). */

export { cocoonSetWorkflow } from './cocoonset.js';
export { vmWorkflow } from './vm.js';
