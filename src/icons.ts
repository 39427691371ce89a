import { LabIcon } from '@jupyterlab/ui-components';

import suspendSvgstr from '../style/icons/suspend.svg';
import verifySvgstr from '../style/icons/verify.svg';

export const suspendIcon = new LabIcon({
  name: 'jupyter-suspend:suspend',
  svgstr: suspendSvgstr
});

export const verifyIcon = new LabIcon({
  name: 'jupyter-suspend:verify',
  svgstr: verifySvgstr
});
