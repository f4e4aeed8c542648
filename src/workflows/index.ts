/** Every workflow the worker registers (bundled from this file). */
export { vmWorkflow } from './vm.js';
